// Package forward holds the cross-node tests of request forwarding
// (control/forward): two or three in-process berth faces (the native API,
// the E2B face, the preview proxy) sharing one SQLite store, each with its
// own node (nodetest.Fake with real in-process agents) and its own node
// listener carrying forward.Receiver, with node entries pointing at each
// other. A sandbox exists only on its owner's node, so every call that
// succeeds through another node went through the forward.
//
// The tests need root (the in-process agent runs commands as other users)
// and skip without it.
package forward
