// Package filetype tells a file's media type and whether it is binary from
// its name and its first bytes. The agent uses it for stat and listing
// metadata, the daemon for the Content-Type of a download, so both faces
// agree on one answer.
//
// The rules, in order:
//
//   - binary: the sniffed bytes hold a NUL byte, or are not UTF-8 (a rune
//     cut by the end of the sniffed window does not count). An empty file is
//     text.
//   - type: the extension's type from a fixed table (below) when the
//     content agrees with it: a text type named by the extension is kept
//     only for text content, so "notes.txt" full of NUL bytes is not served
//     as text/plain. Otherwise net/http.DetectContentType's answer (the
//     WHATWG sniffing algorithm), which knows images, archives, PDF, HTML
//     and XML by their magic bytes and calls other text text/plain.
//
// The table is built in rather than read from /etc/mime.types (what the
// standard mime package does), so the answer does not depend on which image
// a sandbox runs or on the host's files.
package filetype
