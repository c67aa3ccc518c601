# berth code-context kernel for bash. The agent runs it as
# `bash --norc --noprofile -c <this> berth-bash`. Requests arrive one a line
# on fd 3: three base64 fields separated by spaces (the cell's code, a
# snippet that sets the run's env vars, one that restores them); events
# leave as JSON lines on fd 4. A cell's stdout and stderr are fds 1 and 2,
# which the agent streams.
#
# A cell is sourced by the top-level shell (not a function, not a subshell)
# so that what it changes stays: cwd, variables (declare too), functions,
# aliases, options. An interrupt (SIGINT to the process group) kills the
# foreground command; the INT trap then marks the cell interrupted and the
# DEBUG trap (extdebug: a status of 2 returns from the sourced cell, and
# from each function it called) skips the rest of it, loops included.
if ! command -v base64 >/dev/null; then
	echo "a bash code context needs base64 (coreutils) on PATH" >&2
	exit 1
fi
# The sync marks go to the pipes the agent reads, even after a cell
# redirected its shell's stdout or stderr (exec >file).
exec 61>&1 62>&2
shopt -s extdebug expand_aliases
__berth_incell=
__berth_int=
__berth_n=0
trap '[[ -n $__berth_incell ]] && __berth_int=1' INT
trap 'if [[ -n $__berth_int ]]; then if [[ $BASH_COMMAND == __berth_end* ]]; then __berth_int=; __berth_wasint=1; else return 2; fi; fi' DEBUG

__berth_decode() { [[ -n $1 && $1 != - ]] && base64 -d <<<"$1"; }

__berth_end() {
	local st=$1
	__berth_incell=
	__berth_n=$((__berth_n + 1))
	# Must match syncMark in agent/interp_kernel.go.
	printf '\000\001berth-sync\001\000' >&61 2>/dev/null
	printf '\000\001berth-sync\001\000' >&62 2>/dev/null
	if [[ -n $__berth_wasint ]]; then
		printf '{"type":"error","error":{"name":"KeyboardInterrupt","value":"Execution interrupted","traceback":"KeyboardInterrupt: Execution interrupted"}}\n' >&4
	elif ((st != 0)); then
		printf '{"type":"error","error":{"name":"ExitError","value":"exit status %d","traceback":"the cell ended with exit status %d"}}\n' "$st" "$st" >&4
	fi
	__berth_wasint=
	eval "$__berth_post"
	printf '{"type":"complete","executionCount":%d}\n' "$__berth_n" >&4
}

printf '{"type":"ready","pid":%d}\n' "$$" >&4
while IFS=' ' read -r __berth_c __berth_pre __berth_post <&3; do
	__berth_code=$(__berth_decode "$__berth_c")
	__berth_post=$(__berth_decode "$__berth_post")
	eval "$(__berth_decode "$__berth_pre")"
	__berth_incell=1
	source <(printf '%s\n' "$__berth_code") 3<&- 4>&- 61>&- 62>&-
	__berth_end $?
done
