# install_packages LABEL [apt-get options --] PACKAGE...: installs the Debian packages not
# installed yet (with sudo when not root). Sourced by setup.sh and fuzz.sh.
install_packages() {
  local label=$1 options=()
  shift
  if [[ ${1:-} == --* ]]; then
    while [[ $1 != -- ]]; do options+=("$1"); shift; done
    shift
  fi
  local package missing=()
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
  done
  ((${#missing[@]})) || return 0
  local sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "$label: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${options[@]}" "${missing[@]}" >/dev/null
}
