// Package tenant is who a call is made for, as the layers below the API
// faces need to know it: the calling tenant carried in a context (With,
// From) and what one start of a tenant's sandbox asks of the operator
// policy (Request, Usage).
//
// It is a leaf so that the node (package node/local, which records each
// sandbox's tenant and asks admission before every start) and the
// operator policy (package policy, which decides) share these without
// either importing the other: policy.WithTenant, policy.TenantFrom,
// policy.Request and policy.Usage are these, under their older names.
package tenant
