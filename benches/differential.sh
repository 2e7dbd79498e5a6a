#!/usr/bin/env bash
# The scheduler's differential property test, long: random batches against the sequential
# interpreter (src/run/scheduler/differential/). CASES defaults to 40,000 (about 6 minutes on
# 2 cores, debug build).
set -euo pipefail
cd "$(dirname "$0")/.."
PROPTEST_CASES="${CASES:-40000}" cargo test --lib differential -- --nocapture
