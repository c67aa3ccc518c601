// Package mcp drives `berth mcp` with the official MCP TypeScript client
// (npm @modelcontextprotocol/sdk, pinned in package-lock.json) against a
// real `berth serve`: the node:test scripts in js/ spawn bin/berth mcp over
// stdio, configured by BERTH_URL and BERTH_API_KEY only, and work in a real
// sandbox through its tools. The Go test (build tag mcp, root) starts the
// daemon like test/compat and runs each script.
//
//	(cd test/mcp && npm ci)
//	BERTH_IT_ID=<digit> BERTH_BIN=$PWD/bin go test -count=1 -tags mcp -v ./test/mcp/
package mcp
