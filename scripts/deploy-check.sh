#!/usr/bin/env bash
# Validates the Kubernetes deployment (deploy/helm/berth) without a cluster:
#   1. helm lint --strict and helm template with each deploy/helm/berth/ci/*.yaml;
#   2. kubeconform -strict on everything rendered, against JSON schemas made
#      offline from the Kubernetes OpenAPI document (deploy/kubeschema) of the
#      chart's oldest and the newest Kubernetes, with every resource
#      accounted for (a kind without a schema is an error);
#   3. every `berth serve` flag the chart passes exists in `berth serve --help`;
#   4. negative controls: each deploy/helm/testdata/bad-*.yaml must fail at
#      the stage it names with the text it names, and a chart with a broken
#      template must fail, or this script fails;
#   5. deploy/kubernetes/berth.yaml (the chart rendered, for kubectl apply)
#      is current: `scripts/deploy-check.sh --write` remakes it.
#
# Tools and schemas are pinned here, the one place their versions are named:
# helm and kubeconform are built from the Go module proxy; the schemas come
# from api/openapi-spec/swagger.json of the k8s.io/kubernetes module (the
# Go module proxy is the only source of it this machine reaches). Each module
# is checked against the hash below as well as by go against the checksum
# database. Built tools and schemas are cached in $BERTH_TOOLS_CACHE (default
# ~/.cache/berth-tools); with a warm cache the check takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

helm_mod=helm.sh/helm/v3 helm_version=v3.22.0
helm_sum=h1:n1if5iQgHYsujPAcO5oonH/KiSNUmqmUF0iGVjSF3AU=
kubeconform_mod=github.com/yannh/kubeconform kubeconform_version=v0.8.0
kubeconform_sum=h1:loDYd3a3spjIFrauqW67CDKF55Oo9R6uvC8AvpVd4ug=
# The Kubernetes versions validated against, each as "version module-hash
# sha256-of-swagger.json": the chart's floor (kubeVersion in Chart.yaml; the
# check below keeps the two in step) and the newest. The negative controls
# run against the newest (the last).
k8s_versions=(
  "v1.30.14 h1:MrlKXh9uhLIJpyxOeXhcndzRVSvwiV9iJ8NgH8nqPsg= 137f22097f146caa3150deda2eccceec1ecd0b628054d1887bf55f93e715c7cb"
  "v1.37.2 h1:A2VDEiObzkYqFTKhSsn0ZEb0RlLEXpHWj93gi2HqEwE= 465276aedf437726de5a6ed23a41b86d78bb0d347edf251a755ae26a93cdd8a6"
)

# Flags the chart passes that `berth serve` does not have yet, each with
# the change bringing it. A known debt, as in docs/layers.txt:
# the check fails once a listed flag exists, so strike it then.
pending_flags=(
  # every flag the chart passes exists in berth serve now
)

chart=deploy/helm/berth
testdata=deploy/helm/testdata
cache=${BERTH_TOOLS_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/berth-tools}
mkdir -p "$cache/bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "deploy-check: $*" >&2; exit 1; }

# module_dir MOD VERSION SUM: downloads the module (outside this module, so
# go.mod is left alone), checks its hash and prints its directory.
module_dir() {
  local json dir sum
  json=$(cd "$work" && go mod download -json "$1@$2") || fail "go mod download $1@$2 failed"
  dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$json")
  sum=$(sed -n 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p' <<<"$json")
  [[ "$sum" == "$3" ]] || fail "$1@$2 has hash $sum, pinned $3"
  [[ -d "$dir" ]] || fail "$1@$2: no module directory in: $json"
  echo "$dir"
}

# tool NAME MOD VERSION SUM PKG: builds PKG at the pinned module version
# into the cache once; prints the binary's path.
tool() {
  local bin="$cache/bin/$1-$3"
  if [[ ! -x "$bin" ]]; then
    module_dir "$2" "$3" "$4" >/dev/null
    echo "==> building $1 $3 from the Go module proxy (once; cached in $cache)" >&2
    local gobin
    gobin=$(mktemp -d "$cache/bin/.build-XXXXXX")
    GOBIN="$gobin" go install -trimpath -ldflags "-s -w" "$5@$3" || { rm -rf "$gobin"; fail "go install $5@$3 failed"; }
    mv -f "$gobin/$1" "$bin" && rm -rf "$gobin"
  fi
  echo "$bin"
}

helm=$(tool helm "$helm_mod" "$helm_version" "$helm_sum" helm.sh/helm/v3/cmd/helm)
kubeconform=$(tool kubeconform "$kubeconform_mod" "$kubeconform_version" "$kubeconform_sum" github.com/yannh/kubeconform/cmd/kubeconform)

render() { "$helm" template berth "$@" --namespace berth --kube-version "$kube"; }

# validate FILE: kubeconform must find every resource of FILE valid.
validate() {
  local out n
  n=$(grep -c '^kind: ' "$1" || true)
  ((n > 0)) || fail "$1 rendered no resources"
  out=$("${kc[@]}" <"$1" 2>&1) || fail "kubeconform refused $1:"$'\n'"$out"
  grep -qF "Valid: $n, Invalid: 0, Errors: 0, Skipped: 0" <<<"$out" ||
    fail "kubeconform did not validate all $n resources of $1: $out"
  echo "    $out"
}

# schemas_for VERSION SUM SHA: makes (once) the JSON schemas of one
# Kubernetes version; prints their folder. Remade when the spec or the
# converter changes: the folder's stamp names both.
schemas_for() {
  local stamp dir k8s_dir swagger
  stamp=$( (echo "$3"; cat deploy/kubeschema/*.go) | sha256sum | cut -c1-16)
  dir="$cache/kubeschemas/$1-$stamp"
  if [[ ! -d "$dir/$1-standalone-strict" ]]; then
    k8s_dir=$(module_dir k8s.io/kubernetes "$1" "$2")
    swagger="$k8s_dir/api/openapi-spec/swagger.json"
    echo "$3  $swagger" | sha256sum -c --quiet - >&2 || fail "$swagger does not match its pinned sha256"
    go run ./deploy/kubeschema -spec "$swagger" -version "$1" -out "$dir" >&2
  fi
  echo "$dir"
}

floor=$(sed -n 's/^kubeVersion: ">=\([0-9]*\.[0-9]*\)\..*/\1/p' "$chart/Chart.yaml")
[[ "${k8s_versions[0]}" == "v$floor."* ]] || fail "Chart.yaml's kubeVersion floor is ${floor:-unset}; the first version checked is ${k8s_versions[0]%% *}"

keep=()
for entry in "${k8s_versions[@]}"; do
  read -r version sum sha <<<"$entry"
  schemas=$(schemas_for "$version" "$sum" "$sha")
  keep+=(! -path "$schemas")
  kube=${version#v}
  kc=("$kubeconform" -strict -summary -kubernetes-version "$kube"
      -schema-location "$schemas/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json")
  echo "==> helm ${helm_version}, kubeconform ${kubeconform_version}, Kubernetes ${version} schemas"
  for values in "$chart"/ci/*.yaml; do
    name=$(basename "$values" .yaml)
    echo "==> $name"
    "$helm" lint --strict --quiet --kube-version "$kube" "$chart" -f "$values" >"$work/lint.log" 2>&1 ||
      { cat "$work/lint.log" >&2; fail "helm lint --strict failed with $values"; }
    render "$chart" -f "$values" >"$work/$name.yaml" || fail "helm template failed with $values"
    validate "$work/$name.yaml"
    # helm prints large numbers as floats (6.8719476736e+10) unless the
    # template converts them; berth's integer flags would refuse that.
    if grep -nE -- '"--[a-z-]+=[0-9.]+e\+[0-9]+"' "$work/$name.yaml"; then
      fail "$name: a flag rendered in exponent form"
    fi
  done
done
# Schemas of an older spec, version or converter are not used again.
find "$cache/kubeschemas" -mindepth 1 -maxdepth 1 -type d "${keep[@]}" -exec rm -rf {} +
# From here on, kc and kube are the newest version's.
grep -qF -- '"--upper-size=68719476736"' "$work/minimal-values.yaml" || fail "minimal-values: --upper-size not rendered as bytes"

# deploy/kubernetes/berth.yaml is the chart rendered for readers and for
# kubectl apply; it must be what the chart renders now.
plain=deploy/kubernetes/berth.yaml
{
  echo "# Generated by scripts/deploy-check.sh --write from deploy/helm/berth with"
  echo "# deploy/kubernetes/values.yaml (namespace berth); change those, not this."
  render "$chart" -f deploy/kubernetes/values.yaml
} >"$work/plain.yaml" || fail "helm template failed with deploy/kubernetes/values.yaml"
if [[ "${1:-}" == --write ]]; then cp "$work/plain.yaml" "$plain"; echo "==> wrote $plain"; fi
cmp -s "$work/plain.yaml" "$plain" || fail "$plain is not what the chart renders: run scripts/deploy-check.sh --write"
echo "==> $plain"
validate "$plain"

# The defaults alone must not render: the image and S3 have no default.
if render "$chart" >"$work/defaults.log" 2>&1; then fail "the chart rendered without image.repository and s3.endpoint"; fi

echo "==> berth serve knows every flag the chart passes"
go build -o "$work/berth" ./cmd/berth
"$work/berth" serve --help >"$work/help.txt"
has_flag() { grep -qE -- "--$1( |$)" "$work/help.txt"; }
flags=$(cat "$work"/*-values.yaml | sed -n 's/^ *- "--\([a-z0-9-]*\).*/\1/p' | sort -u)
[[ -n "$flags" ]] || fail "found no berth serve flags in the rendered DaemonSets"
missing=()
for f in $flags; do
  pending=0
  for p in "${pending_flags[@]}"; do [[ "$f" == "$p" ]] && pending=1; done
  if has_flag "$f"; then
    ((pending == 0)) || fail "--$f now exists in berth serve: strike it from pending_flags in $0"
  elif ((pending == 0)); then
    missing+=("--$f")
  fi
done
((${#missing[@]} == 0)) || fail "the chart passes flags berth serve does not have: ${missing[*]}"
echo "    $(wc -w <<<"$flags") flags; still pending in berth serve: ${pending_flags[*]:-none}"

echo "==> negative controls (each must fail)"
for bad in "$testdata"/bad-*.yaml; do
  stage=$(sed -n 's/^# stage: //p' "$bad")
  expect=$(sed -n 's/^# expect: //p' "$bad")
  [[ -n "$stage" && -n "$expect" ]] || fail "$bad lacks its # stage: and # expect: lines"
  case "$stage" in
    helm)
      if render "$chart" -f "$chart/ci/minimal-values.yaml" -f "$bad" >"$work/out" 2>&1; then
        fail "$bad: helm rendered it; it must refuse"
      fi ;;
    kubeconform)
      render "$chart" -f "$chart/ci/minimal-values.yaml" -f "$bad" >"$work/bad.yaml" 2>"$work/out" ||
        fail "$bad: helm refused it (want a kubeconform failure): $(cat "$work/out")"
      if "${kc[@]}" <"$work/bad.yaml" >"$work/out" 2>&1; then fail "$bad: kubeconform accepted it"; fi ;;
    manifest)
      if "${kc[@]}" <"$bad" >"$work/out" 2>&1; then fail "$bad: kubeconform accepted it"; fi ;;
    *) fail "$bad: unknown stage $stage" ;;
  esac
  grep -qF -- "$expect" "$work/out" || fail "$bad failed, but without \"$expect\":"$'\n'"$(cat "$work/out")"
  echo "    $(basename "$bad"): refused by $stage"
done

# A broken template, not just a bad value: a misspelt pod field in a copy
# of the chart must fail validation.
cp -r "$chart" "$work/mutant"
sed -i 's/^      hostPID: true$/      hostPid: true/' "$work/mutant/templates/daemonset.yaml"
grep -q 'hostPid: true' "$work/mutant/templates/daemonset.yaml" || fail "the mutant chart was not changed (daemonset.yaml moved on?)"
render "$work/mutant" -f "$chart/ci/minimal-values.yaml" >"$work/mutant.yaml"
if "${kc[@]}" <"$work/mutant.yaml" >"$work/out" 2>&1; then fail "a DaemonSet with hostPid (misspelt) passed kubeconform"; fi
grep -qF "additional properties 'hostPid' not allowed" "$work/out" || fail "mutant failed for another reason: $(cat "$work/out")"
echo "    a chart with a misspelt template field: refused by kubeconform"
echo "==> deploy-check passed"
