#!/usr/bin/env bash
# Installs what the browser and end-to-end test layers need on a fresh Debian machine.
# Idempotent: when everything is already there it only checks, in well under a second.
#
#   bash scripts/setup-test-deps.sh [apt] [browser] [e2e]
#
#   apt      every Debian package any test layer needs, python3-torch for the torchrun tests
#            and a Mesa with lavapipe new enough for Dawn for the webgpu tests included, and
#            Slurm with munge for the Slurm launcher/executor tests (CI runs this once, before
#            `npm ci`)
#   browser  Debian chromium (driven by playwright-core; never `playwright install`)
#   e2e      chromium, libkrb5-dev and ripgrep from Debian, then code-server into
#            .e2e-cache/code-server/ (git-ignored, kept between runs)
#
# code-server is deliberately not a dependency of the project: its native modules need
# libkrb5-dev and a compiler, which a user's `npm install` must not need. See ../shared/E2E.md.
set -euo pipefail
cd "$(dirname "$0")/.."

code_server_version=4.100.3
# @vscode/ripgrep as pinned by code-server 4.100.3; its postinstall downloads rg from GitHub
# unless this tarball is already in its cache (the name is tied to that package's version).
ripgrep_pkg_version=1.15.11
ripgrep_tarball=ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz

# `apt` means "the Debian part of every layer", so that CI does all its apt work in one go
# before `npm ci`; code-server comes only with an explicit `e2e`.
want_browser=0 want_e2e=0 want_torch=0 want_vulkan=0 want_slurm=0 install_code_server=0
[ $# -eq 0 ] && set -- apt
for arg in "$@"; do
  case "$arg" in
    apt) want_browser=1 want_e2e=1 want_torch=1 want_vulkan=1 want_slurm=1 ;;
    browser) want_browser=1 ;;
    e2e) want_browser=1 want_e2e=1 install_code_server=1 ;;
    *) echo "setup-test-deps: unknown argument '$arg' (expected apt, browser or e2e)" >&2; exit 2 ;;
  esac
done

# --- Debian packages ------------------------------------------------------------------
packages=()
[ "$want_browser" = 1 ] && packages+=(chromium)
[ "$want_e2e" = 1 ] && packages+=(libkrb5-dev ripgrep)
# The torchrun tests launch a real `python -m torch.distributed.run` (CPU, gloo) with Debian's
# PyTorch for /usr/bin/python3; without it they skip and say why. OpenBLAS (pthread) because the
# reference BLAS python3-torch pulls in by default is about 9x slower.
[ "$want_torch" = 1 ] && packages+=(python3-torch libopenblas0-pthread)
# The Slurm tests (test/support/slurmCluster.ts) start a real two-node cluster on this host as
# root: munged, slurmctld and two slurmd with fake GPUs. The munge package makes
# /etc/munge/munge.key. Not root, or these missing: those tests skip and say why.
[ "$want_slurm" = 1 ] && packages+=(slurm-wlm slurmctld slurmd slurm-client munge)
# code-server's native modules (kerberos, node-pty, spdlog, ...) are compiled by node-gyp.
if [ "$want_e2e" = 1 ]; then
  for tool in make g++ python3; do
    command -v "$tool" >/dev/null || { packages+=(make g++ python3); break; }
  done
fi

is_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

missing=()
for p in "${packages[@]}"; do is_installed "$p" || missing+=("$p"); done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup-test-deps: missing Debian packages: ${missing[*]}" >&2
    echo "  install them with:  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "setup-test-deps: installing from Debian: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Several test runs may start at once on a developer machine; apt's own lock fails fast
  # instead of waiting, so serialise here.
  (
    flock 9
    still=()
    for p in "${missing[@]}"; do is_installed "$p" || still+=("$p"); done
    if [ ${#still[@]} -gt 0 ]; then
      apt-get update -qq
      apt-get install -y -qq "${still[@]}" >/dev/null
    fi
  ) 9>/tmp/gpu-workbench-apt.lock
  for p in "${missing[@]}"; do
    is_installed "$p" || { echo "setup-test-deps: apt-get did not install $p" >&2; exit 1; }
  done
fi

# --- Vulkan for the webgpu tests: Mesa's lavapipe (a CPU Vulkan driver) ------------------
# Dawn (the `webgpu` package) needs a Vulkan driver; on a machine without a GPU, lavapipe from
# mesa-vulkan-drivers runs the very same shaders on the CPU. Dawn refuses bookworm's Mesa 22.3
# ("Vulkan shaderUniform*ArrayDynamicIndexing required": no adapter); bookworm-backports' 25.x
# works, so on bookworm it comes from there (Debian's own repository, signed by its archive
# key). Newer Debian releases have a Mesa new enough in main. Without it the webgpu tests skip
# and say why (in CI they fail instead).
mesa_min=23
mesa_ok() {
  local v
  v=$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null) || return 1
  is_installed mesa-vulkan-drivers && dpkg --compare-versions "$v" ge "$mesa_min"
}
if [ "$want_vulkan" = 1 ] && ! mesa_ok; then
  codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
  backports_file=/etc/apt/sources.list.d/gpu-workbench-bookworm-backports.sources
  has_backports() { grep -rqs '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; }
  if [ "$codename" = bookworm ]; then
    install_cmd="apt-get install -y -t bookworm-backports mesa-vulkan-drivers"
  else
    install_cmd="apt-get install -y mesa-vulkan-drivers"
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "setup-test-deps: the webgpu tests need mesa-vulkan-drivers >= $mesa_min (lavapipe); without it they skip" >&2
    if [ "$codename" = bookworm ] && ! has_backports; then
      echo "  add Debian's bookworm-backports:  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' | sudo tee $backports_file" >&2
    fi
    echo "  then:  sudo apt-get update && sudo $install_cmd" >&2
    exit 1
  fi
  echo "setup-test-deps: installing mesa-vulkan-drivers (lavapipe) for the webgpu tests${codename:+ on $codename}"
  export DEBIAN_FRONTEND=noninteractive
  (
    flock 9
    if ! mesa_ok; then
      if [ "$codename" = bookworm ] && ! has_backports; then
        printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' >"$backports_file"
      fi
      apt-get update -qq
      $install_cmd -qq >/dev/null
    fi
  ) 9>/tmp/gpu-workbench-apt.lock
  mesa_ok || { echo "setup-test-deps: mesa-vulkan-drivers >= $mesa_min was not installed ($install_cmd)" >&2; exit 1; }
fi

[ "$install_code_server" = 1 ] || exit 0

# --- code-server, into a cache folder of its own ----------------------------------------
cache=.e2e-cache/code-server
marker="$cache/.installed-$code_server_version"
entry="$cache/node_modules/code-server/out/node/entry.js"
if [ -f "$marker" ] && [ -f "$entry" ]; then
  exit 0
fi

mkdir -p "$cache"
exec 8>"$cache/../code-server.lock"
flock 8
if [ -f "$marker" ] && [ -f "$entry" ]; then exit 0; fi   # another run finished it meanwhile

echo "setup-test-deps: installing code-server $code_server_version into $cache (about a minute)"
started=$(date +%s)
rm -rf "$cache/node_modules" "$cache"/.installed-* "$cache/package-lock.json"
# A package.json of its own, so npm treats this folder as the project root and never touches
# the repository's package.json or lockfile.
cat >"$cache/package.json" <<EOF
{ "name": "gpu-workbench-e2e-cache", "private": true, "description": "code-server for the end-to-end tests; made by scripts/setup-test-deps.sh" }
EOF

rgcache="$(node -p 'require("os").tmpdir()')/vscode-ripgrep-cache-$ripgrep_pkg_version"
if [ ! -f "$rgcache/$ripgrep_tarball" ]; then
  rg_bin=$(command -v rg || true)
  [ -n "$rg_bin" ] || { echo "setup-test-deps: ripgrep (rg) is needed to seed @vscode/ripgrep's cache; apt-get install ripgrep" >&2; exit 1; }
  mkdir -p "$rgcache"
  tar czf "$rgcache/$ripgrep_tarball" -C "$(dirname "$rg_bin")" rg
fi

# --unsafe-perm: as root, code-server's postinstall refuses to run without it.
# npm_config_yes: node-pty's postinstall runs `npx node-gyp`, which this machine's npmrc (yes=false) would cancel.
log="$cache/../code-server-install.log"
if ! npm_config_yes=true npm install --prefix "$cache" --unsafe-perm --no-save --no-package-lock \
     --no-audit --no-fund --loglevel=error "code-server@$code_server_version" >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "setup-test-deps: npm install code-server@$code_server_version failed; full log in $log" >&2
  exit 1
fi
[ -f "$entry" ] || { echo "setup-test-deps: code-server installed but $entry is missing; see $log" >&2; exit 1; }
got=$(node -p "require('./$cache/node_modules/code-server/package.json').version")
[ "$got" = "$code_server_version" ] || { echo "setup-test-deps: expected code-server $code_server_version, got $got" >&2; exit 1; }
touch "$marker"
echo "setup-test-deps: code-server $code_server_version ready in $(( $(date +%s) - started )) s"
