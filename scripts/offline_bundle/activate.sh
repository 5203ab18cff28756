# Source this file on the GPU machine (bash or zsh):  source BUNDLE/activate.sh
# The first time, install.py installs the bundle into $FAIRSEQ_SAN_PREFIX (default: BUNDLE/prefix)
# with $PYTHON (default: python3, the machine's Python with torch), without network. Then
# fairseq-* and fairseq-san-* are on PATH, and python is that Python.
_fs_bundle=$(CDPATH= cd -- "$(dirname -- "${BASH_SOURCE[0]:-$0}")" > /dev/null && pwd)
_fs_prefix=${FAIRSEQ_SAN_PREFIX:-$_fs_bundle/prefix}
case $_fs_prefix in /*) ;; *) _fs_prefix=$PWD/$_fs_prefix ;; esac  # PATH stays right after a cd
if "${PYTHON:-python3}" "$_fs_bundle/install.py" "$_fs_prefix"; then
  case ":${PYTHONPATH:-}:" in  # sourced again: each path once
    *":$_fs_prefix:"*) ;;
    *) export PYTHONPATH="$_fs_prefix${PYTHONPATH:+:$PYTHONPATH}" ;;
  esac
  case ":$PATH:" in *":$_fs_prefix/bin:"*) ;; *) export PATH="$_fs_prefix/bin:$PATH" ;; esac
  unset _fs_bundle _fs_prefix
else
  unset _fs_bundle _fs_prefix
  false
fi
