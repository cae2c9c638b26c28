#!/usr/bin/env bash
# bump-version: make a release version the chart's, in one step.
#
#   make bump-version NEW=0.2.0     # or: scripts/bump-version.sh 0.2.0
#
# Sets deploy/helm/epochfs/Chart.yaml `version` to NEW and `appVersion` to vNEW,
# the chart's default image.tag (values.yaml) and deploy/README.md's image table
# to vNEW, and turns CHANGELOG.md's "## [Unreleased]" into "## [NEW] - today"
# under a new empty Unreleased section. It refuses a NEW that is not
# MAJOR.MINOR.PATCH or not greater than the current version, and changes
# nothing then. Commit and tag (git tag vNEW) yourself after reading the diff.
set -euo pipefail
cd "$(dirname "$0")/.."
new=${1:?usage: $0 MAJOR.MINOR.PATCH}
[[ $new =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "bump-version: $new is not MAJOR.MINOR.PATCH" >&2; exit 2; }
chart=deploy/helm/epochfs/Chart.yaml
old=$(sed -n 's/^version: *//p' "$chart")
[ -n "$old" ] || { echo "bump-version: no version in $chart" >&2; exit 1; }
if [ "$(printf '%s\n%s\n' "$old" "$new" | sort -V | tail -n1)" != "$new" ] || [ "$old" = "$new" ]; then
  echo "bump-version: $new is not greater than the current version $old" >&2
  exit 2
fi
grep -q '^## \[Unreleased\]' CHANGELOG.md || { echo "bump-version: CHANGELOG.md has no '## [Unreleased]' section" >&2; exit 1; }
sed -i "s/^version: .*/version: $new/; s/^appVersion: .*/appVersion: \"v$new\"/" "$chart"
sed -i "0,/^  tag: v$old\$/s//  tag: v$new/" deploy/helm/epochfs/values.yaml
sed -i "s/epochfs:v$old/epochfs:v$new/g; s/| \`v$old\` |/| \`v$new\` |/" deploy/README.md
sed -i "s/^## \[Unreleased\]/## [Unreleased]\n\n## [$new] - $(date -u +%F)/" CHANGELOG.md
echo "bump-version: $old -> $new (Chart.yaml, values.yaml image.tag, deploy/README.md, CHANGELOG.md); review with git diff, then commit and git tag v$new"
