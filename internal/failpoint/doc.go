// Package failpoint lets tests crash the daemon at named lifecycle steps, to
// prove that a restart reconciles whatever the crash left behind.
//
// Failpoints exist only in a build with the berthtest tag (the test scripts
// set it; scripts/up.sh and release builds do not). Without the tag Hit is an
// empty function the compiler inlines away.
//
// In a berthtest build it is driven by the BERTH_FAILPOINTS environment
// variable, a comma list of step=action pairs. The action "exit" ends the
// process at once with status 137, as kill -9 would (no deferred cleanup
// runs); "kill9" sends the process a real SIGKILL. Without the variable
// every Hit is a cheap no-op.
package failpoint
