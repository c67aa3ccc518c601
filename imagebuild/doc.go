// Package imagebuild builds OCI images from Dockerfiles inside berth
// (`berth image build`, POST /v1/images/builds).
//
// The Dockerfile is parsed by buildkit's frontend/dockerfile parser and
// instructions packages (no parser of our own); what berth does not run
// (RUN --mount/--network/--security, HEALTHCHECK, ONBUILD, VOLUME, ADD of a
// URL, heredocs, ...) is refused with an invalid-argument error naming the
// line. Each RUN executes in a fresh berth sandbox started from the stage
// so far (stored as an unnamed intermediate image), under the build's
// egress policy, so a build reaches only allowed hosts and secrets arrive
// through the egress proxy's injection, never as bytes in a layer. The
// sandbox's writable layer is captured by the snapshot path (package
// snapshot's hostile-upper capture) and becomes the step's layer. COPY and
// ADD read the context (unpacked with image.Unpack's hostile-input rules)
// or another stage's layers through openat2(RESOLVE_IN_ROOT), see copy.go.
//
// Steps are cached by a hash of the previous step's key, the expanded
// instruction and its inputs (cache.go), so a rebuild reruns from the
// first changed step; the log says CACHED for the others.
package imagebuild
