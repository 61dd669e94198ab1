import KeyManager

/// What a sync run's report means for whoever ran it: the rules that judge a run, kept beside the run so every
/// front end (the CLI, the agent, a library user) judges it the same way. A front end maps each case to its exit
/// status and prints the message; it decides nothing itself.
public enum SyncOutcome: Sendable, Equatable {
    /// Every user (and every client registration) was reconciled.
    case reconciled
    /// Some users could not be reconciled; the others were. Each error names its user (exit 2).
    case someUsersFailed([SyncReport.UserError])
    /// The run failed as a whole after its report was made: the safety valve held every change back (3), or every
    /// listing failed for one reason, the server being unreachable (69) or refusing the credential (77).
    case failed(SyncError)
}

extension SyncReport {
    /// The run judged: a tripped valve first, then a failure of every user for one reason, then some users' failures.
    public var outcome: SyncOutcome {
        if safetyValveTripped {
            return .failed(SyncError(.safetyValve, """
                safety valve: this run would revoke \(plannedRevocations) keys the server no longer lists, \
                more than the limit of \(revocationLimit) (--max-revoke \(Self.percent(maxRevokePercent)) of the active keys); \
                nothing was applied. Check the server first (a wrong realm or credential, or a server fault, can make keys \
                look removed): `keymgr sync --dry-run` shows the plan, `keymgr sync --force` applies it
                """))
        }
        if let outage = serverWideFailure {
            let what = noDeviceRegistry ? "no registration could be read" : "no user was reconciled"
            return .failed(SyncError(outage.code, "\(what): \(outage.message)"))
        }
        return errors.isEmpty ? .reconciled : .someUsersFailed(errors)
    }

    /// Every user's listing and every client registration's read failed because the server is unreachable, or
    /// because it refuses the credential: the run failed as a whole (69 or 77), not "some users" (2).
    var serverWideFailure: (code: FailureCode, message: String)? {
        let reconcilable = users + registrationsChecked
        guard reconcilable > 0, errors.count == reconcilable, let first = errors.first else { return nil }
        for code in [FailureCode.serverUnavailable, .unAuthorize] where errors.allSatisfy({ $0.code == code }) {
            return (code, first.message)
        }
        return nil
    }

    /// `20 %`, `12.5 %`.
    static func percent(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) %" : "\(value) %"
    }
}
