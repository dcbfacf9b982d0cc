package quorum

// withoutTopUpCopies makes e's top-ups start, and count in TopUps, but send
// no copy: the engine then leaves a lock granted on a bare quorum as
// Redlock does, for TestTopUpEffect to compare with.
func withoutTopUpCopies(e *Engine) { e.hooks.skipTopUpCopies = true }
