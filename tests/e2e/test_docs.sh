#!/bin/sh
# tests/e2e/test_docs.sh - the docs that name files name files that exist.
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does
# this).  POSIX sh + sed.
#
# What is checked: every path in backquotes in docs/howto.md (the recipes for
# adding an architecture, a weight type, a kernel and an HTTP endpoint) and
# in the README's "Architecture" section that starts with src/, tools/,
# cli/, tests/, include/, docs/, bench/ or scripts/ exists in the tree (a
# {a,b} or [ch] pattern is expanded first; a path with a placeholder such as
# NAME or *.c is skipped).  Each page is one check that lists what is missing.
#
# The last line is "tests/e2e/test_docs.sh: N passed, M failed".
set -u
. tests/e2e/lib.sh
e2e_init

# paths PAGE: the candidate paths of a page, one per line
paths() {
    grep -o '`[^`]*`' "$1" | tr -d '`' | grep -E '^(src|tools|cli|tests|include|docs|bench|scripts)/[][A-Za-z0-9_./{},-]*$' |
        grep -v -E 'NAME|\*' | sort -u
}
# expand P: a{b,c} -> ab ac; x.[ch] -> x.c x.h (one level, as the docs write them)
expand() {
    case "$1" in
    *'{'*'}'*)
        pre=${1%%\{*}
        rest=${1#*\{}
        alts=${rest%%\}*}
        post=${rest#*\}}
        printf '%s\n' "$alts" | tr ',' '\n' | while read -r a; do expand "$pre$a$post"; done ;;
    *'.[ch]') printf '%s\n%s\n' "${1%.\[ch\]}.c" "${1%.\[ch\]}.h" ;;
    *) printf '%s\n' "$1" ;;
    esac
}
check_page() { # NAME PAGE
    missing=""
    n=0
    for p in $(paths "$2"); do
        for q in $(expand "$p"); do
            n=$((n + 1))
            [ -e "$q" ] || missing="$missing $q"
        done
    done
    if [ "$n" -eq 0 ]; then
        e2e_fail "$1" "no paths found in $2 (the check itself is broken)"
    elif [ -n "$missing" ]; then
        e2e_fail "$1" "missing:$missing"
    else
        e2e_ok "$1 ($n paths)"
    fi
}
check_page "docs/howto.md names existing files" docs/howto.md
sed -n '/^## Architecture/,/^## [^A]/p' README.md >"$E2E_TMP/arch.md"
check_page "README architecture section names existing files" "$E2E_TMP/arch.md"

# a path that does not exist must be caught (the check can fail)
printf 'see `src/model/no_such_file.c`\n' >"$E2E_TMP/bad.md"
out=$(paths "$E2E_TMP/bad.md")
if [ "$out" = "src/model/no_such_file.c" ] && [ ! -e "$out" ]; then
    e2e_ok "a missing path is found"
else
    e2e_fail "a missing path is found" "paths() gave '$out'"
fi
e2e_summary
