#!/usr/bin/env bash
# Run test binaries under valgrind's memcheck: no invalid access, no uninitialised read,
# no definitely or indirectly lost block (a "possibly lost" 48 bytes is the test harness's
# thread-local output capture, not ours). Exits non-zero on the first failing binary.
#
#     scripts/valgrind.sh                      # the default set below
#     scripts/valgrind.sh notifier_trait fd_view # named test targets (`lib` = the unit tests)
#
# Not part of .ci/run (minutes under valgrind); run it before a release.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(lib notifier_trait epoll_semantics epoll_threads fd_view diff_epoll diff_epoll_settled)
fi
out=$(cargo test --all-features --no-run --message-format=json 2>/dev/null)
for t in "${targets[@]}"; do
    if [ "$t" = lib ]; then
        kind='"lib"'
        name=evfd
    else
        kind='"test"'
        name=$t
    fi
    exe=$(printf '%s\n' "$out" | python3 -c '
import json, sys
kind, name = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["target"]["name"] == name and kind.strip("\"") in m["target"]["kind"]:
        print(m["executable"])
        break
' "$kind" "$name")
    if [ -z "$exe" ]; then
        echo "valgrind.sh: no test binary for $t" >&2
        exit 2
    fi
    echo "== $t ($exe)"
    EVFD_PROPTEST_CASES=${EVFD_PROPTEST_CASES:-100} valgrind --quiet --error-exitcode=9 \
        --leak-check=full --show-leak-kinds=definite,indirect \
        --errors-for-leak-kinds=definite,indirect "$exe" --test-threads=1 2>&1 | tail -3
done
echo "valgrind.sh: all clean"
