#!/usr/bin/env bash
# Installs headless Chromium and its WebDriver from Debian's packages for the browser tier
# (tests/browser). Idempotent: does nothing when both are there.
set -euo pipefail
exec bash "$(dirname "$0")/../apt-install-missing.sh" browser chromium chromium-driver
