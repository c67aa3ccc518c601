// Package e2b is berth's E2B-compatible face: the official E2B SDKs (npm
// e2b, @e2b/code-interpreter) run against berth unchanged, configured only by
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY.
//
// Handler.Wrap mounts it beside the native API on the same listener:
//
//   - the control plane (POST /sandboxes, GET /v2/sandboxes, …), authenticated
//     by X-API-Key with the daemon's API key or a tenant's key from the
//     operator policy (whose calls are then scoped to that tenant's
//     sandboxes and quotas, as on the native API), answers errors as
//     {code, message};
//   - the data plane is any request carrying E2b-Sandbox-Id/E2b-Sandbox-Port
//     headers or a {port}-{id}.{domain} Host: port 49983 is envd (health,
//     /files, and the process and filesystem Connect services generated from
//     proto/ into envdpb/), port 49999 the code interpreter (/execute,
//     /contexts) on berth's interpreter contexts, any other port is proxied
//     to the sandbox through the agent's TCP tunnel.
//
// An E2B sandbox ID (20 characters of [a-z0-9]) is the berth sandbox name,
// so the mapping persists with the sandbox record; E2B state (template,
// metadata, end of life, on-timeout action) lives in labels prefixed
// "e2b.". The envd access token is an HMAC of the ID under a daemon secret,
// so it needs no storage and forks get their own. Network settings map
// onto berth's egress policy (egressFor).
//
// Template builds (templatebuild.go): Template.build, exists, tags
// and delete work over berth's Dockerfile builder. A template is the
// berth images "e2b-<name>:<tag>" (a build without a tag is
// "latest"); the recipe becomes a Dockerfile (RUN in exec form, COPY
// of the uploaded file sets, ENV, WORKDIR, USER; the stock base
// e2bdev/base is debian-trixie, whose steps run as "user", as E2B's
// do) and the start and ready commands ride in the image's labels, so
// a sandbox created from the template runs its start command (berth's
// start command, process "start") and its create waits for the ready
// command to exit 0 (60 s at most). Differences: the build happens
// once and each sandbox runs the start command at its own boot (E2B
// snapshots the running start command into the template); copy
// sources with wildcards, fromImageRegistry credentials and step
// types other than those five are refused (400 naming the step);
// build records (status and logs) live in memory, so a build in
// flight when berth stops is lost (its finished images are not);
// uploads go to a URL on berth itself, signed per template and hash,
// and are kept under <data>/e2b-builds/files/<scope>/<template>. A
// tenant's templates are its own: its images are "e2b-t<hash of the
// tenant>.<name>:<tag>", which no other key resolves, tags or deletes, and
// its uploads live under its own scope (the link is signed for it).
//
// Not supported yet, and what the SDK gets instead (never a hang):
//
//   - Secrets and volume management: 404 {code, message} "… is not
//     supported by berth's E2B API".
//   - Volumes: create's volumeMounts [{name, path}] maps onto berth volume
//     mounts (read-write; a berth extension readOnly: true mounts
//     read-only) of the berth volumes with those names, made with `berth
//     volume create` or POST /v1/volumes. The rules are berth's: one
//     read-write mount at a time (a second create answers 409 with the
//     writer's name, as berth's own API does for a failed
//     precondition), paths resolved without symlinks, names of a-z, 0-9,
//     '.', '_', '-'. SandboxDetail lists the mounts. E2B's volume API
//     (GET|POST /volumes, GET|DELETE /volumes/{id}, Volume.*) and its
//     content API on E2B_VOLUME_API_URL (/volumecontent/…, whose spec is
//     private) are not served: 404. A berth volume is named, not given an
//     id, and its files are read and written through a sandbox that
//     mounts it.
//   - Create with mcp, network rules/transforms,
//     egressProxy, httpsPorts, maskRequestHost or allowPublicTraffic:false:
//     400 {code, message}.
//   - pause() keeps memory only when the operator's sleep mode is freeze
//     (berth serve --sleep-mode freeze): pause() then freezes the sandbox
//     and connect() thaws it, processes continuing (background commands
//     stay in commands.list() and can be connected to again; the
//     code interpreter keeps its variables). Streams open at the pause end
//     and must be reconnected. A frozen sandbox escalates to a stop (files
//     only) after --freeze-max or under --freeze-memory. Under the default
//     (stop) pause() keeps files but not memory: processes end, connect()
//     starts the sandbox again, and onResume "reboot" is the same as
//     "restore".
//   - File metadata (write with metadata): 400 "not supported".
//   - StreamInput (unused by the SDKs): Connect unimplemented.
//   - Code interpreter languages other than python, javascript and
//     typescript (r, java, bash): 400.
//   - getMetrics: the host's usage samples (package metering, every 5 s
//     from the sandbox's cgroups, disk quota group and veth; E2B samples
//     inside the sandbox): cpuUsedPct is of the sandbox's vCPUs, memTotal
//     its memory limit, diskTotal its quota; memCache is 0. The window
//     holds the samples of serve --metrics-history (default 15 min, E2B
//     keeps longer) while the sandbox runs; a paused sandbox has none.
//     With serve --no-usage berth samples only when asked, inside the
//     sandbox (memory, disk; cpuUsedPct 0).
//   - sudo inside the sandbox: berth sets no-new-privileges, so sudo
//     fails; run commands with user "root" instead.
//   - getHost(port) names {port}-{id}.e2b.app (the SDK's default domain);
//     berth routes such Host names, but they need DNS pointing at berth.
//     The SDK's own traffic uses E2B_SANDBOX_URL with routing headers.
//   - Users other than "user" and "root": 401 as envd answers an unknown
//     user.
//   - Envd routes /envs, /metrics, /files/compose, /init: 404 {code, message}.
//
// Regenerate envdpb after editing proto/: cd e2b && go run
// github.com/bufbuild/buf/cmd/buf@v1.75.0 generate
package e2b
