// Package httpio is how every agent service reads a request body and writes
// an answer: JSON bodies bounded and checked for UTF-8, answers as JSON, and
// errors as api.Error with the status of their errdefs kind. The agent's
// service packages share it so that they answer alike.
package httpio
