// Command berth is the berth CLI: `berth serve` runs the daemon, and every
// other command is a thin client of the HTTP API through the client package
// (sandbox, exec, cp, image, snapshot, fork, backup, bench). The CLI holds no logic of its own
// beyond argument parsing and output formatting, so everything it can do an
// SDK user can do too.
package main
