# need_commands SCRIPT COMMAND...: stop in one line where a command is not on PATH, before
# anything runs. Without the environment of make setup activated, bash said
# "line 24: fairseq-san-loop: command not found" (exit 127), naming neither the cause nor the fix.
need_commands() {
  local script=$1 command
  shift
  for command in "$@"; do
    command -v "$command" > /dev/null || {
      echo "$script: $command not found on PATH (activate the environment of make setup)" >&2
      exit 1; }
  done
}
