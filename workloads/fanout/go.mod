module fanout

go 1.26
