#!/bin/sh
# The `file_count` tool (file_count.yaml). stdin: {"extension": "md"}.
# aurad checks the arguments against the schema before this runs, and the
# schema's pattern allows letters and digits only, so sed reads the value
# exactly. Errors go to stderr with a non-zero exit; the model sees them.
set -eu
extension=$(sed -n 's/.*"extension"[[:space:]]*:[[:space:]]*"\([A-Za-z0-9]*\)".*/\1/p')
if [ -z "$extension" ]; then
    echo 'expected {"extension": "<letters and digits>"} on stdin' >&2
    exit 2
fi
cd ..
# The project without its build output and git data.
list() {
    find . \( -path ./target -o -path ./.git \) -prune -o -type f -name "*.$extension" "$@"
}
files=$(list -print | wc -l | tr -d ' ')
lines=$(list -exec cat {} + | wc -l | tr -d ' ')
echo "$files .$extension file(s), $lines line(s)"
