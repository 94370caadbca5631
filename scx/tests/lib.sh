# Sourced by the guest scripts of this folder.
# stdin as one JSON string. No python3 in the guest scripts: it takes ~4 s to start under TCG.
json() { awk 'BEGIN { ORS = ""; print "\"" } { gsub(/\\/, "&&"); gsub(/"/, "\\\""); gsub(/\t/, "\\t"); print $0 "\\n" } END { print "\"" }'; }
