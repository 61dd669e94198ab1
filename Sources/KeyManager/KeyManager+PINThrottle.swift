import Foundation
import Storage

/// The agent's throttle of wrong PINs per calling uid across every identity user (docs/security.md, "Wrong PINs
/// from a shared account"): a shared account (a kiosk) that guesses other people's PINs gets 3 wrong PINs in
/// 10 minutes, then its next attempt on another person's key waits (75, nothing tried, nothing spent), and each
/// block doubles the wait. A person's attempts on their own keys are not throttled: the key's own lockout rule holds.
enum PINThrottle {
    /// Wrong PINs within `window` that block the uid.
    static let limit = 3
    static let window: TimeInterval = 10 * 60
    /// The first block's wait; each further block doubles it, up to `longestWait`.
    static let firstWait = 10 * 60
    static let longestWait = 24 * 60 * 60
    /// After this long without a wrong PIN, the uid's wait starts again from `firstWait`.
    static let forgiveAfter: TimeInterval = 24 * 60 * 60

    /// What a counted guess changed, so that a right PIN gives it back.
    struct Mark {
        let uid: Int64
        /// The block this guess started (its `blockedUntil`), if it was the `limit`-th.
        let startedBlock: Date?
        let waitBefore: Int
    }
}

extension KeyManager {
    /// Whether the identity user `userId` is `caller`'s own: linked to the caller's uid (a person link), or mapped to
    /// the caller's login by the policy's `[self]` table, as `reach` decides it; never a matching name. Only this
    /// decides whose PIN attempts are throttled.
    func isCallersOwn(userId: String, caller: AgentCaller) throws -> Bool {
        try read { try owns(userId, uid: caller.uid, scope: context.scope, in: $0) }
    }

    /// The caller whose PIN attempts on a key of `userId` are throttled: the agent's caller, unless the key is theirs.
    /// Nil when keymgr runs directly (embedded mode: one person, whose keys are all theirs).
    func throttledCaller(forKeyOf userId: String) throws -> AgentCaller? {
        guard let caller = context.caller, try !isCallersOwn(userId: userId, caller: caller) else { return nil }
        return caller
    }

    /// In the guess's write transaction, before anything else: refuses a blocked caller (`busy`, 75: the transaction
    /// rolls back, so no attempt of the key is spent), else counts the guess as wrong until it proves right (so a
    /// guess whose process is killed mid-check still counts, as the key's own counter does).
    func countThrottledGuess(_ writer: StoreWriter, caller: AgentCaller, at now: Date) throws -> PINThrottle.Mark {
        let uid = Int64(caller.uid)
        var row = try writer.pinThrottle(uid: uid)
            ?? PINThrottleRecord(uid: uid, login: caller.login, failures: 0, windowStartedAt: now, lastFailureAt: nil,
                                 blockedUntil: nil, waitSeconds: PINThrottle.firstWait, updatedAt: now)
        if let until = row.blockedUntil, until > now {
            throw Self.throttledError(caller: caller, until: until, now: now)
        }
        if let last = row.lastFailureAt, now.timeIntervalSince(last) >= PINThrottle.forgiveAfter {
            row.waitSeconds = PINThrottle.firstWait
        }
        if now.timeIntervalSince(row.windowStartedAt) >= PINThrottle.window || row.blockedUntil != nil {
            row.failures = 0
            row.windowStartedAt = now
            row.blockedUntil = nil
        }
        let waitBefore = row.waitSeconds
        row.login = caller.login
        row.failures += 1
        row.lastFailureAt = now
        row.updatedAt = now
        var startedBlock: Date?
        if row.failures >= PINThrottle.limit {
            let until = now.addingTimeInterval(TimeInterval(row.waitSeconds))
            startedBlock = until
            row.blockedUntil = until
            row.waitSeconds = min(row.waitSeconds * 2, PINThrottle.longestWait)
        }
        try writer.save(row)
        return PINThrottle.Mark(uid: uid, startedBlock: startedBlock, waitBefore: waitBefore)
    }

    /// The guess was right: gives back what `countThrottledGuess` counted (and the block it started, if any).
    func settleThrottledGuess(_ mark: PINThrottle.Mark, at now: Date) throws {
        try write { writer in
            guard var row = try writer.pinThrottle(uid: mark.uid) else { return }
            row.failures = max(0, row.failures - 1)
            if let started = mark.startedBlock, let until = row.blockedUntil,
               Timestamp.string(from: started) == Timestamp.string(from: until) {
                row.blockedUntil = nil
                row.waitSeconds = mark.waitBefore
            }
            row.updatedAt = now
            try writer.save(row)
        }
    }

    /// The answer to a blocked caller: when to try again, and that nothing was tried.
    static func throttledError(caller: AgentCaller, until: Date, now: Date) -> KeyManagerError {
        let minutes = max(1, Int((until.timeIntervalSince(now) / 60).rounded(.up)))
        return KeyManagerError(.busy, "\(caller.auditActor) gave \(PINThrottle.limit) wrong PINs for other people's keys "
            + "within \(Int(PINThrottle.window / 60)) minutes: try again after \(Timestamp.string(from: until)) "
            + "(in \(minutes) minute\(minutes == 1 ? "" : "s")); nothing was tried and no attempt was spent. "
            + "Each further block doubles the wait; your own keys are not held back")
    }
}
