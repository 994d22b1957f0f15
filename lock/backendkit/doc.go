// Package backendkit is the toolkit for writing a lock.Lock backend: the
// input checks, the errors a backend builds, release notifications,
// telemetry, and the waiting loop that the packages built on lock share.
// A user of locks does not need it.
//
// # Writing a backend
//
//   - Declare an option type of your own, a func(*yourSettings) error, with
//     a WithCommon(lock.Common) that merges (c.Merge). The constructor
//     applies the options with Apply, fills the Common's defaults with
//     Resolve, and records through NewTelemetry(common).Backend(name).
//     Input errors come from Invalid("yourpkg", …), so that they name your
//     package and match lock.ErrInvalidArgument.
//   - State your lock.Limits (implement lock.Limited on the Lock and on its
//     handles) and check them first in every operation: Validate
//     (ValidateKeys, ValidateSubscribe, ValidateKey, CheckContext).
//   - When the key is held, return NotAcquired (NotAcquiredAny for several
//     keys) with the remaining ttl, converted with RemainingMillis when the
//     server reports milliseconds.
//   - Wrap driver and network errors with Unavailable; report a lost grant
//     with an error that matches lock.ErrLost (Lost).
//   - Set a handle's ValidUntil with ValidUntil (the ttl less
//     DriftAllowance) from a clock reading taken before the request was
//     sent.
//   - Implement lock.Waiter with a Notifier fed from the backend's release
//     channel, and lock.Owned to report the instance's owner identity.
//   - Run lock/locktest.Run against a real server.
package backendkit
