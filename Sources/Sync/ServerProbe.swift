import Foundation
import KeyManager
import ServerClients
import Synchronization

/// `keymgr doctor`'s server check, one per profile: the server answers, its clock (its answers' `Date`) is within a
/// minute of this device's, and it accepts the admin credential. One read-only request: a device listing (with the
/// admin credential) of an identity nobody has, so no person's identity is sent or named; for a dialect without a
/// device registry, a GET of its base URL.
public enum ServerProbe {
    /// The identity the listing asks about: none of the store's, so the answer (a listing or 404) says nothing of
    /// anyone, and no person is named in a message.
    static let probeUser = "keymgr-doctor-probe"

    /// Each server profile's check, in the profiles' order (none when no server is configured: `sync` says so).
    public static func checks(_ manager: KeyManager, timeout: TimeInterval) async -> [DoctorCheck] {
        guard let profiles = try? manager.serverProfiles().map(\.name), !profiles.isEmpty else { return [] }
        var checks: [DoctorCheck] = []
        for profile in profiles { checks.append(await check(manager, profile: profile, timeout: timeout)) }
        return checks
    }

    /// Said when the checks could not be run to their end.
    public static let unfinished = DoctorCheck("server", ok: false, "the server check did not finish",
                                               fix: "run `keymgr doctor` again")

    /// The check of `profile`, named `server` for the default profile and `server.PROFILE` for another.
    public static func check(_ manager: KeyManager, profile: String, timeout: TimeInterval) async -> DoctorCheck {
        let name = profile == "default" ? "server" : "server.\(profile)"
        let connection: ServerConnection
        do {
            connection = try ServerConnection.configured(in: manager, profile: profile, timeout: timeout)
        } catch {
            return DoctorCheck(name, ok: false, "the server profile \(profile) cannot be read: \(describe(error))",
                               fix: "run `keymgr server show --profile \(profile)`")
        }
        let base = connection.settings.baseURL.absoluteString
        let recorder = DateRecorder(connection.http)
        let probing = ServerConnection(settings: connection.settings, http: recorder, environment: connection.environment)
        var answered = "it answered"
        do {
            if let devices = try probing.deviceClient() {
                _ = try await devices.listDevices(userId: probeUser)
                answered = "it accepts the admin credential"
            } else {
                _ = try await recorder.send(HTTPRequest(method: "GET", url: connection.settings.baseURL))
            }
        } catch let error as TransportError {
            switch error.kind {
            case .credentialRefused:
                return DoctorCheck(name, ok: false, "the server at \(base) refused the admin credential "
                    + "(\(error.verdict.map { String($0.status) } ?? "401"))",
                    fix: "put a valid admin token in the credential file (`keymgr server set --credential-file F`)")
            case .rejected where error.verdict?.status == 404:
                answered = "it accepts the admin credential"  // the listing passed the credential check
            case .rejected, .malformed:
                return DoctorCheck(name, ok: false, "the server at \(base) answered, but not as a \(connection.settings.dialect.rawValue) "
                    + "server: \(error.message)", fix: "check the base URL and realm (`keymgr server show`)")
            case .unavailable, .timeout:
                return DoctorCheck(name, ok: false, "the server at \(base) cannot be reached: \(error.message)",
                                   fix: "check the network and the server's address (`keymgr server show`)")
            }
        } catch {
            // No admin credential, or one that cannot be read: the profile's configuration, not the server.
            return DoctorCheck(name, ok: false, describe(error),
                               fix: "give the admin credential: `keymgr server set --credential-file F`")
        }
        guard let skew = recorder.skew else {
            return DoctorCheck(name, ok: true, "\(base) answers and \(answered) (it sent no Date to compare clocks with)")
        }
        if abs(skew) > TimeInterval(StoreStatus.reportedSkew) {
            let direction = skew > 0 ? "behind" : "ahead of"
            return DoctorCheck(name, ok: false, "this device's clock is \(Int(abs(skew))) s \(direction) the clock of "
                + "the server at \(base) (its Date): proofs and tokens may be refused as not yet valid or expired",
                fix: "set this device's clock (`timedatectl set-ntp true`), or the server's")
        }
        return DoctorCheck(name, ok: true, "\(base) answers and \(answered); clocks agree within "
            + "\(StoreStatus.reportedSkew) s")
    }

    private static func describe(_ error: any Error) -> String {
        (error as? any KeymgrFailure)?.message ?? String(describing: error)
    }
}

/// An HTTP client that remembers the last answer's `Date` against this device's clock when it came.
private final class DateRecorder: HTTPClient, Sendable {
    private let inner: any HTTPClient
    private let offset = Mutex<TimeInterval?>(nil)

    init(_ inner: any HTTPClient) { self.inner = inner }

    /// Seconds the server's clock is ahead of this device's (negative: behind), from the last answer with a `Date`.
    var skew: TimeInterval? { offset.withLock { $0 } }

    func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        let response = try await inner.send(request)
        let received = Date()
        if let text = response.headers["date"], let date = ServerClock.httpDate(text) {
            offset.withLock { $0 = date.timeIntervalSince(received).rounded() }
        }
        return response
    }
}
