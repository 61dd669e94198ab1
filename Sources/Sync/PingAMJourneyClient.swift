import Foundation
import KeyManager

/// Runs PingAM authentication journeys (`POST {base}/json{realm}/authenticate?authIndexType=service&authIndexValue=J`)
/// that bind a key (DeviceBindingCallback) or answer a challenge with one (DeviceSigningVerifierCallback).
///
/// Callbacks are answered by type; inputs are matched by the suffix of their names (`IDToken1jws`, …)
/// as the Ping SDKs do, so the callback's position in the journey does not matter.
public struct PingAMJourneyClient: Sendable {
    public let profile: ServerProfile
    let http: any HTTPClient
    /// A journey that asks for more than this many steps is broken, not long.
    public var maxSteps = 10

    public init(profile: ServerProfile, http: any HTTPClient) {
        self.profile = profile
        self.http = http
    }

    /// What the journey's user answers with.
    public struct Credentials: Sendable {
        /// For NameCallback.
        public var username: String
        /// For PasswordCallback; asked only if the journey has one.
        public var password: @Sendable () throws -> SecretBytes

        public init(username: String, password: @escaping @Sendable () throws -> SecretBytes) {
            self.username = username
            self.password = password
        }
    }

    /// Runs `journey`, binding a key when the server sends a DeviceBindingCallback; returns the key, registered.
    ///
    /// The callback's `authenticationType` decides the auth type; a conflicting `requestedAuthType` is a usage error.
    /// - Parameter newPIN: asked only when the server wants an APPLICATION_PIN key.
    public func bind(journey: String, credentials: Credentials, requestedAuthType: AuthType?, manager: KeyManager,
                     newPIN: @escaping SecretProvider) async throws -> BindResult {
        let identity = try manager.deviceIdentity()
        var bound = try await run(journey: journey, credentials: credentials, answering: "DeviceBindingCallback") { callback in
            guard let authName = callback.outputValue("authenticationType")?.stringValue, let authType = AuthType(flag: authName) else {
                throw KeyManagerError(.unsupported, "the server asked for an auth type keymgr does not know")
            }
            if let requestedAuthType, requestedAuthType != authType {
                throw KeyManagerError(.usage, "the journey \(journey) binds with \(authType.rawValue), but --auth-type says \(requestedAuthType.rawValue): drop --auth-type")
            }
            var request = BindRequest(userId: try callback.output("userId"))
            request.username = callback.outputValue("username")?.stringValue ?? credentials.username
            request.authType = authType
            request.challenge = try callback.output("challenge")
            request.expiresIn = try Self.lifetime(of: callback)
            let result = try manager.bind(request, newPIN: newPIN)
            callback.set("jws", .string(result.jws ?? ""))
            callback.set("deviceName", .string(identity.deviceName))
            callback.set("deviceId", .string(identity.deviceId))
            return result
        }
        try manager.markRegistered(kid: bound.key.kid, deviceName: identity.deviceName)
        bound.key.serverState = "registered"
        bound.key.deviceName = identity.deviceName
        return bound
    }

    /// Runs `journey`, signing the server's challenge when it sends a DeviceSigningVerifierCallback.
    public func sign(journey: String, credentials: Credentials, claims: [String: JSONValue], manager: KeyManager,
                     pin: @escaping SecretProvider) async throws -> SignResult {
        try await run(journey: journey, credentials: credentials, answering: "DeviceSigningVerifierCallback") { callback in
            var request = SignRequest(userId: try callback.output("userId"), kid: nil)
            request.challenge = try callback.output("challenge")
            request.claims = claims
            request.expiresIn = try Self.lifetime(of: callback)
            let result = try manager.sign(request, pin: pin)
            callback.set("jws", .string(result.jws))
            return result
        }
    }

    /// The JWS lifetime the callback asks for (`timeout`, default 60 s); keymgr signs for 1 to 3600 seconds.
    static func lifetime(of callback: Callback) throws -> Int {
        guard let value = callback.outputValue("timeout") else { return 60 }
        guard let seconds = value.intValue, (1...3600).contains(seconds) else {
            throw KeyManagerError(.serverRejected, "the server's \(callback.type) asks for a JWS lifetime of \(value.canonicalJSON()) seconds; keymgr signs for 1 to 3600")
        }
        return Int(seconds)
    }

    /// Drives the journey, answering Name and Password callbacks and handing the `device` callback to `answer`;
    /// returns what `answer` made once the server reports success.
    private func run<Result>(journey: String, credentials: Credentials, answering device: String,
                             answer: (Callback) throws -> Result) async throws -> Result {
        let url = try authenticateURL(journey: journey)
        var body: JSONValue = .object([:])
        var handled: Result?
        for _ in 0..<maxSteps {
            let response = try await post(url, body)
            guard let object = try? JSONDecoder().decode(JSONValue.self, from: response.body).objectValue else {
                throw KeyManagerError(.serverUnavailable, "the server's journey answer is not JSON (HTTP \(response.status))")
            }
            if response.status == 200, object["tokenId"] != nil || object["successUrl"] != nil {
                guard let handled else {
                    throw KeyManagerError(.serverRejected, "the journey \(journey) ended without a \(device): check the journey name")
                }
                return handled
            }
            guard response.status == 200, let callbacks = object["callbacks"]?.arrayValue else {
                let message = object["message"]?.stringValue ?? "HTTP \(response.status)"
                let code: KeyManagerError.Code = response.status >= 500 ? .serverUnavailable : .serverRejected
                throw KeyManagerError(code, "the server ended the journey \(journey): \(message)")
            }
            var answered: [JSONValue] = []
            for raw in callbacks {
                let callback = Callback(raw)
                switch callback.type {
                case "NameCallback":
                    callback.setFirstInput(.string(credentials.username))
                case "PasswordCallback":
                    let password = try credentials.password()
                    callback.setFirstInput(.string(password.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }))
                case device:
                    do {
                        handled = try answer(callback)
                    } catch let error as KeyManagerError {
                        // Tell the server why, as the SDKs do with clientError, then report the local error.
                        if let clientError = Self.clientError(for: error.code) {
                            callback.set("clientError", .string(clientError))
                            var failed = object
                            failed["callbacks"] = .array([callback.json])
                            _ = try? await post(url, .object(failed))
                        }
                        throw error
                    }
                default:
                    break
                }
                answered.append(callback.json)
            }
            var next = object
            next["callbacks"] = .array(answered)
            body = .object(next)
        }
        throw KeyManagerError(.serverRejected, "the journey \(journey) took more than \(maxSteps) steps")
    }

    private func post(_ url: URL, _ body: JSONValue) async throws -> HTTPResponse {
        let request = HTTPRequest(method: "POST", url: url, headers: [
            "Content-Type": "application/json", "Accept": "application/json",
            "Accept-API-Version": "resource=2.0, protocol=1.0",
        ], body: Data(body.canonicalJSON().utf8))
        do {
            return try await http.send(request)
        } catch let failure as SyncFailure {
            throw KeyManagerError(failure.kind == .timeout ? .timeout : .serverUnavailable, failure.message)
        }
    }

    func authenticateURL(journey: String) throws -> URL {
        let text = profile.jsonBase + "/authenticate?authIndexType=service&authIndexValue="
            + PingAMDeviceClient.percentEncodedSegment(journey)
        guard let url = URL(string: text) else {
            throw KeyManagerError(.config, "cannot build the authenticate URL from \(profile.baseURL.absoluteString)")
        }
        return url
    }

    /// The `clientError` values the SDKs report to the server.
    static func clientError(for code: KeyManagerError.Code) -> String? {
        switch code {
        case .unsupported: "Unsupported"
        case .clientNotRegistered: "ClientNotRegistered"
        case .timeout: "Timeout"
        case .abort: "Abort"
        default: nil
        }
    }
}

/// One callback of a journey step, answered in place.
final class Callback {
    private(set) var json: JSONValue

    init(_ json: JSONValue) {
        self.json = json
    }

    var type: String { json["type"]?.stringValue ?? "" }

    func outputValue(_ name: String) -> JSONValue? {
        json["output"]?.arrayValue?.first { $0["name"]?.stringValue == name }?["value"]
    }

    func output(_ name: String) throws -> String {
        guard let value = outputValue(name)?.stringValue, !value.isEmpty else {
            throw KeyManagerError(.serverRejected, "the server's \(type) has no \(name)")
        }
        return value
    }

    /// Sets the input whose name ends with `suffix` (`IDToken1jws` for "jws").
    func set(_ suffix: String, _ value: JSONValue) {
        setInput(where: { $0.hasSuffix(suffix) }, value)
    }

    func setFirstInput(_ value: JSONValue) {
        var done = false
        setInput(where: { _ in defer { done = true }; return !done }, value)
    }

    private func setInput(where matches: (String) -> Bool, _ value: JSONValue) {
        guard var object = json.objectValue, let inputs = object["input"]?.arrayValue else { return }
        object["input"] = .array(inputs.map { input in
            guard var entry = input.objectValue, let name = entry["name"]?.stringValue, matches(name) else { return input }
            entry["value"] = value
            return .object(entry)
        })
        json = .object(object)
    }
}
