// Package e2e holds the workspace's end-to-end tests: every service binary's
// commands run against scratch databases, exactly as an operator runs them.
package e2e
