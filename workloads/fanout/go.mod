module fanout

go 1.25
