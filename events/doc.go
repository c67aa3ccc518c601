// Package events turns the journal into lifecycle events (issue 18 item 3)
// and delivers them to operator webhooks.
//
// Every lifecycle step of a sandbox is already a journal entry (node/local's
// journal, through the controller object's stream); Map names the ones that
// are events (api.Event*), and skips the rest: the API's own records of
// calls (server/journal.go, detail "METHOD /path"), ports, processes,
// network changes, claims and other internal steps. An event's id is its
// entry's sequence number, so a reader resumes after the last id it saw
// (Feed.After), and an id never names two events.
//
// Feed reads the journal through store.Store.JournalAfter and fills in the
// tenant from the sandbox's record (or the last one it saw of that name;
// empty when neither is known, e.g. a sandbox destroyed before this
// process saw it). A record created after the entry belongs to a later
// sandbox of the same name, and its tenant is not used.
//
// Webhook POSTs each event as JSON to one URL, in order, with the headers
// Berth-Event-Id (the idempotency id), Berth-Event-Type and
// Berth-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>"
// under the shared secret>. Verify checks such a header; a receiver uses
// it (or the same three lines) and dedupes by Berth-Event-Id, since
// delivery is at least once: a failed attempt (network error or a non-2xx
// answer) is retried with exponential backoff, and the cursor (the last
// delivered id) is written to a file after each delivery, so a restarted
// daemon resumes after it.
package events
