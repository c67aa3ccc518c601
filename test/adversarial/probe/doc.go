// Command probe is the adversarial suite's in-sandbox attacker. The suite
// builds it statically (CGO_ENABLED=0), copies it into a sandbox through the
// files API and runs one subcommand per attack. Every subcommand prints one
// JSON object on its last stdout line: what it tried and what happened
// (an errno name, "OK", or a value read). The verdict is judged by the
// test on the host, never by the probe.
//
// The probe makes dangerous calls (mount, reboot(CAD_OFF), mknod, writes
// to kernel knobs). It refuses to run in the host's initial PID namespace,
// so running it on a host by mistake does nothing.
package main
