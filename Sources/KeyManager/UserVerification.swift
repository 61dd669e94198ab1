import CProcessControl
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

    /// Runs one verifier command within `timeout`. It stays in this process's group and is killed if this process
    /// dies (`keymgr_spawn`: PR_SET_PDEATHSIG), so an agent's worker killed, or killed with its group, takes its
    /// verifier with it: nothing a request starts outlives it (docs/agent.md, "Process model").
    private func run(_ argv: [String]?, userId: String, timeout: TimeInterval) -> Outcome {
        guard let argv, let program = argv.first else { return .unavailable }
        let arguments = [program] + argv.dropFirst().map {
            $0.replacingOccurrences(of: "{osUser}", with: osUser).replacingOccurrences(of: "{userId}", with: userId)
        }
        let child = Self.spawn(program, arguments)
        guard child > 0 else { return .unavailable }
        var status: Int32 = 0
        let milliseconds = Int64(max(0, min(timeout, Double(Int64.max / 2_000))) * 1000)
        let waited = keymgr_wait_child(child, milliseconds, &status)
        if waited < 0 { return .unavailable }
        if waited == 0 {
            kill(child, SIGTERM)
            if keymgr_wait_child(child, 2000, &status) != 1 {
                kill(child, SIGKILL)
                _ = keymgr_wait_child(child, Int64.max / 2, &status)
            }
            return .timedOut
        }
        // Exited normally (WIFEXITED) with 0 or 1; a signal, or 127 (could not be executed), is unavailable.
        guard status & 0x7f == 0 else { return .unavailable }
        switch (status >> 8) & 0xff {
        case 0: return .verified
        case 1: return .rejected
        default: return .unavailable
        }
    }

    /// Starts `program` with `arguments` (argv, its first the program) and this process's environment.
    private static func spawn(_ program: String, _ arguments: [String]) -> pid_t {
        var pointers: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for pointer in pointers { free(pointer) } }
        return pointers.withUnsafeMutableBufferPointer { buffer in
            guard let argv = buffer.baseAddress else { return -1 }
            return keymgr_spawn(program, argv, environ)
        }
    }
}
