#!/bin/sh
# An $EDITOR for tests: leaves a file that is not valid YAML.
printf 'journals: [\n  - name: demo/a\n' > "$1"
