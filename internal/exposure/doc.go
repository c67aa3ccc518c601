// Package exposure is the plain data of a sandbox's exposed port: the
// record a preview URL resolves to (Exposure), the dialer into the port
// (DialFunc), the stale-URL error (ErrStale) and the shape of its token
// (NewToken, CheckToken).
//
// The node (package node/local) keeps the exposures of its sandboxes and
// the tunnel into them; the preview face (package preview) routes URLs to
// them. Both use this leaf, so the node does not import the face: the
// names in package preview (preview.Exposure, preview.ErrStale,
// preview.NewToken, …) are these.
package exposure
