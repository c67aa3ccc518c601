// Package storetest is the conformance suite every store.Store
// implementation must pass (run it from the implementation's tests).
package storetest
