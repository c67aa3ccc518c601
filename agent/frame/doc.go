// Package frame is the binary framing of a streamed exec between berth-agent
// and the host: [type:1][length:4, big-endian][payload]. It is shared by the
// agent (which writes frames) and agentclient (which reads them, treating the
// agent as untrusted), and depends on nothing but the standard library so the
// static agent stays small.
package frame
