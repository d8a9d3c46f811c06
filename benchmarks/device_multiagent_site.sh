#!/usr/bin/env bash
# Add PettingZoo, SuperSuit, MPE2, Pistonball's pygame and pymunk to .device-site/ (after
# ../shared/device/prepare.sh), for `benchmarks/device_run.sh multiagent`. pygame's docs, examples
# and tests are left out, so that the whole carry stays under the 64 MiB a device call takes.
set -euo pipefail
SITE=$(pwd)/.device-site
test -d "$SITE" || { echo "run ../shared/device/prepare.sh first" >&2; exit 2; }
WHL=$(mktemp -d)
trap 'rm -rf "$WHL"' EXIT
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
for p in pettingzoo==1.27.0 supersuit==3.11.0 tinyscaler==1.2.8 pymunk==7.3.1 pygame-ce==2.5.8 mpe2==1.1.1 cffi==2.1.1; do
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$WHL" "$p" 2>&1 | grep -v '^WARNING' || true
done
for w in "$WHL"/*.whl; do unzip -q -o "$w" -d "$SITE"; done
rm -rf "$SITE"/pygame/docs "$SITE"/pygame/examples "$SITE"/pygame/tests
du -sh "$SITE"
