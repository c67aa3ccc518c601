// Package child is what every agent service that runs a program needs to
// know about its child once it is started: how it ended (Exit, ExitStatus),
// how its output pipes are drained without losing what it wrote (ReadPipe,
// DrainAvailable, DrainDelay), and how its whole process tree is found and
// killed (KillTree, Children, Stat).
//
// Starting children is the agent's reaper's job (the agent is PID 1 and
// must own every wait status); this package only deals with what comes
// after.
package child
