// Package reqinfo carries what the request log says about one API request
// (its id, the route that served it, the sandbox and the tenant) from the
// handlers that learn it to the middleware that logs it, and gives the
// error writers of both API faces the id to put in their bodies.
package reqinfo
