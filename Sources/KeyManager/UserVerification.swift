import Foundation

/// Runs the configured verifier commands for the biometric auth types.
///
/// A verifier exits 0 when the user is verified and 1 when rejected; anything else (or failing to start)
/// means it is unavailable. On Linux this is a policy check, not hardware-bound protection.
struct UserVerification: Sendable {
    /// argv of the biometric verifier, with `{osUser}` and `{userId}` placeholders.
    let biometric: [String]?
    /// argv of the device-credential verifier (BIOMETRIC_ALLOW_FALLBACK's fallback).
    let credential: [String]?
    let osUser: String

    enum Outcome: Equatable {
        case verified, rejected, unavailable, timedOut
    }

    /// Throws `unsupported` when `authType` cannot be verified with the commands configured here.
    func ensureUsable(_ authType: AuthType) throws {
        switch authType {
        case .none, .applicationPIN:
            return
        case .biometricOnly:
            if biometric == nil {
                throw KeyManagerError(.unsupported, "BIOMETRIC_ONLY needs a biometric verifier, and none is configured on this device: "
                    + "set one with `keymgr config set biometric-verifier CMD`, or bind with another auth type")
            }
        case .biometricAllowFallback:
            if biometric == nil && credential == nil {
                throw KeyManagerError(.unsupported, "BIOMETRIC_ALLOW_FALLBACK needs a biometric or device-credential verifier, and none is configured: "
                    + "set one with `keymgr config set biometric-verifier CMD` or `keymgr config set credential-verifier CMD`")
            }
        }
    }

    /// Verifies the user for a biometric auth type; throws the taxonomy's error when it does not succeed.
    func verify(_ authType: AuthType, userId: String, timeout: TimeInterval) throws {
        try ensureUsable(authType)
        switch authType {
        case .none, .applicationPIN:
            return
        case .biometricOnly:
            try conclude(run(biometric, userId: userId, timeout: timeout), what: "biometric verification")
        case .biometricAllowFallback:
            let first = run(biometric, userId: userId, timeout: timeout)
            if first == .verified { return }
            guard credential != nil else {
                try conclude(first, what: "biometric verification")
                return
            }
            try conclude(run(credential, userId: userId, timeout: timeout), what: "device-credential verification")
        }
    }

    private func conclude(_ outcome: Outcome, what: String) throws {
        switch outcome {
        case .verified:
            return
        case .rejected:
            throw KeyManagerError(.unAuthorize, "\(what) rejected the user")
        case .timedOut:
            throw KeyManagerError(.timeout, "\(what) did not answer in time: try again, or raise --timeout")
        case .unavailable:
            throw KeyManagerError(.unsupported, "\(what) is unavailable on this device (the verifier command failed): check its configuration")
        }
    }

    private func run(_ argv: [String]?, userId: String, timeout: TimeInterval) -> Outcome {
        guard let argv, let program = argv.first else { return .unavailable }
        let arguments = argv.dropFirst().map {
            $0.replacingOccurrences(of: "{osUser}", with: osUser).replacingOccurrences(of: "{userId}", with: userId)
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = Array(arguments)
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        let finished = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in finished.signal() }
        do { try process.run() } catch { return .unavailable }
        if finished.wait(timeout: .now() + timeout) == .timedOut {
            process.terminate()
            if finished.wait(timeout: .now() + 2) == .timedOut { kill(process.processIdentifier, SIGKILL) }
            return .timedOut
        }
        switch (process.terminationReason, process.terminationStatus) {
        case (.exit, 0): return .verified
        case (.exit, 1): return .rejected
        default: return .unavailable
        }
    }
}
