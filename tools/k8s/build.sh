#!/usr/bin/env bash
# Builds the real Kubernetes components from their Go modules with the machine's Go, cached
# outside the repository under ${HAMI_K8S_CACHE:-~/.cache/hami-py/k8s}/<versions>/bin.
#   bash tools/k8s/build.sh            build everything missing
#   bash tools/k8s/build.sh kubectl    build one component; its absolute path is the last line
# Progress goes to stderr; a second run finds the binaries and costs nothing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

ALL=(kubectl etcd kube-apiserver kube-controller-manager kube-scheduler kubelet helm kueue containerd
     containerd-shim-runc-v2)
# Keyed by both versions: changing either builds anew (helm is keyed by its own, below).
cache=${HAMI_K8S_CACHE:-$HOME/.cache/hami-py/k8s}/$K8S_VERSION-etcd$ETCD_VERSION
bin=$cache/bin
log() { echo "[k8s-build $(date -u +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }

command -v go >/dev/null || die "go is not on PATH (Go 1.24 or newer builds Kubernetes $K8S_VERSION)"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=${CGO_ENABLED:-0}

# A scratch module that requires k8s.io/kubernetes; its staging modules (k8s.io/api, ...) are
# required as v0.0.0 and replaced by ./staging paths upstream, so we replace them with the
# published v0.<minor>.<patch> tags instead.
k8s_module() {
  local dir=$cache/src/k8s
  [ -f "$dir/.ready" ] && { echo "$dir"; return; }
  mkdir -p "$dir"
  log "resolving k8s.io/kubernetes v$K8S_VERSION (module download, a few minutes the first time)"
  local gomod staging=v0.${K8S_VERSION#1.}
  gomod=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" \
          | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
  [ -f "$gomod" ] || die "could not download k8s.io/kubernetes@v$K8S_VERSION's go.mod"
  {
    echo "module hami-py/k8s-build"
    echo "go 1.24"
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" \
      | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
  } >"$dir/go.mod"
  local cmds=() c
  for c in kubectl kube-apiserver kube-controller-manager kube-scheduler kubelet; do
    cmds+=("k8s.io/kubernetes/cmd/$c@v$K8S_VERSION")
  done
  (cd "$dir" && nice -n 10 go get "${cmds[@]}") >&2 \
     || die "go get of k8s.io/kubernetes v$K8S_VERSION failed (see above)"
  touch "$dir/.ready"
  echo "$dir"
}

# A scratch module that requires one package at one version (etcd's server, helm's command).
#   single_module DIR-NAME PACKAGE VERSION
single_module() {
  local dir=$cache/src/$1 pkg=$2 version=$3
  [ -f "$dir/.ready" ] && { echo "$dir"; return; }
  mkdir -p "$dir"
  log "resolving $pkg v$version"
  printf 'module hami-py/%s-build\ngo 1.24\n' "$1" >"$dir/go.mod"
  (cd "$dir" && nice -n 10 go get "$pkg@v$version") >&2 \
     || die "go get of $pkg v$version failed (see above)"
  touch "$dir/.ready"
  echo "$dir"
}

# helm is keyed by its own version and by this script's recipe for it (HELM_RECIPE, raised
# whenever its build changes: binaries built by an older recipe stay valid for the checkouts
# that use it, and `make k8s` builds the new one beside them).
HELM_RECIPE=2
# Kueue is keyed by its own version too; its module (CRDs included) stays beside it; containerd
# and its shim by theirs (a folder of their own: containerd finds its shim beside it).
ctrd_bin=${HAMI_K8S_CACHE:-$HOME/.cache/hami-py/k8s}/containerd-$CONTAINERD_VERSION/bin
target() {
  case $1 in
    helm) echo "$bin/helm-$HELM_VERSION-r$HELM_RECIPE" ;;
    kueue) echo "$bin/kueue-$KUEUE_VERSION" ;;
    containerd|containerd-shim-runc-v2) echo "$ctrd_bin/$1" ;;
    *) echo "$bin/$1" ;;
  esac
}

# The ldflags an official helm build sets from the k8s.io/client-go its module requires: the
# Kubernetes version that `helm template` and `helm lint` assume when no cluster is reached
# (without them, v1.20, which charts asking for a newer kubeVersion refuse).
helm_k8s_ldflags() {
  local dir=$1 cv major minor v
  cv=$(cd "$dir" && go list -m -f '{{.Version}}' k8s.io/client-go) \
    || die "could not read k8s.io/client-go's version in helm's module"
  [[ $cv =~ ^v0\.([0-9]+)\. ]] || die "unexpected k8s.io/client-go version '$cv' in helm's module"
  major=1 minor=${BASH_REMATCH[1]}
  for v in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    echo -n " -X $v.k8sVersionMajor=$major -X $v.k8sVersionMinor=$minor"
  done
}

# Kueue's CRDs and webhook configurations, from its module, beside its binary.
kueue_config() {
  local out=$1 dir src
  [ -d "$out-config" ] && return
  dir=$(single_module "kueue-$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue "$KUEUE_VERSION")
  src=$(cd "$dir" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue) \
    || die "could not find sigs.k8s.io/kueue's module folder"
  rm -rf "$out-config.tmp" && mkdir -p "$out-config.tmp/crds"
  cp "$src"/config/components/crd/bases/*.yaml "$out-config.tmp/crds/"
  cp "$src"/config/components/webhook/manifests.yaml "$out-config.tmp/webhooks.yaml"
  chmod -R u+w "$out-config.tmp" && mv "$out-config.tmp" "$out-config"
}

build_one() {
  local name=$1 dir pkg ldflags="-s -w" out
  out=$(target "$name")
  [ "$name" = kueue ] && kueue_config "$out"
  [ -x "$out" ] && { log "$name cached"; return; }
  mkdir -p "$(dirname "$out")"
  if [ "$name" = helm ]; then
    pkg=helm.sh/helm/v3/cmd/helm; dir=$(single_module "helm-$HELM_VERSION" "$pkg" "$HELM_VERSION")
    ldflags+=" -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"
    ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean$(helm_k8s_ldflags "$dir")"
  elif [ "$name" = kueue ]; then
    pkg=sigs.k8s.io/kueue/cmd/kueue; dir=$(single_module "kueue-$KUEUE_VERSION" "$pkg" "$KUEUE_VERSION")
    ldflags+=" -X sigs.k8s.io/kueue/pkg/version.GitVersion=v$KUEUE_VERSION"
  elif [[ $name == containerd* ]]; then
    # Without cgo the btrfs snapshotter is left out (its build tag); the rest is pure Go.
    pkg=github.com/containerd/containerd/cmd/$name
    dir=$(single_module "containerd-$CONTAINERD_VERSION" github.com/containerd/containerd \
          "$CONTAINERD_VERSION")
    ldflags+=" -X github.com/containerd/containerd/version.Version=v$CONTAINERD_VERSION"
  elif [ "$name" = etcd ]; then
    pkg=go.etcd.io/etcd/server/v3; dir=$(single_module etcd "$pkg" "$ETCD_VERSION")
  else
    dir=$(k8s_module); pkg=k8s.io/kubernetes/cmd/$name
    # Without these the binaries report v0.0.0-master, which version checks and skew warnings read.
    local v minor
    minor=$(cut -d. -f2 <<<"$K8S_VERSION")
    for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X $v.gitVersion=v$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor"
      ldflags+=" -X $v.gitTreeState=clean"
    done
  fi
  log "building $name ($pkg) ..."
  local t0=$SECONDS
  (cd "$dir" && nice -n 10 go build -trimpath -ldflags="$ldflags" -o "$out.tmp" "$pkg") >&2 \
    || die "go build of $pkg failed (see above)"
  mv "$out.tmp" "$out"
  log "built $name in $((SECONDS - t0)) s"
}

[ $# -eq 0 ] && set -- "${ALL[@]}"
for name in "$@"; do
  [[ " ${ALL[*]} " == *" $name "* ]] || die "unknown component '$name' (one of: ${ALL[*]})"
done
# One build at a time per version (make and a test session may both ask); Kueue has its own
# lock, so that its long first build never holds up the Kubernetes binaries' cache check.
mkdir -p "$cache"
start=$SECONDS
for name in "$@"; do
  lock=$cache/.lock
  [ "$name" = kueue ] && lock=$cache/.lock-kueue-$KUEUE_VERSION
  ( flock 9; build_one "$name" ) 9>"$lock"
done
[ $((SECONDS - start)) -gt 5 ] && log "done in $((SECONDS - start)) s"
target "${*: -1}"
