// Command probe embeds berth with a class Probe that exposes the durable
// Container API one call per method, so the integration suite can drive
// every ctx.Container operation over RPC against a real daemon.
package main
