#!/usr/bin/env bash
# The test command: every test, with all features, then again on the forced pipe fallback.
# EVFD_PROPTEST_CASES sets the kernel-differential case count (default 1000; try 100000).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --all-features
RUSTFLAGS="--cfg evfd_force_pipe" CARGO_TARGET_DIR=target/force-pipe cargo test --all-features
