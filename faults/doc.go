// Package faults is the fault suite (`go tool mage test:faults`):
// the service binaries built with failpoints and killed at every step, a
// misbehaving store in front of the real one, a dying database, and one
// invariant checker every scenario runs after every round.
//
// The scenarios are the package's tests (build tag faults);
// this file's package holds what they share: a world (a service database, a
// bucket of its own, the rows it seeded), its checker and the store proxy.
package faults
