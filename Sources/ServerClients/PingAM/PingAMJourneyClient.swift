import Foundation
import KeyManager

/// PingAM's authentication journeys on the wire (`POST {base}/json{realm}/authenticate?authIndexType=service&authIndexValue=J`):
/// steps, callbacks and their answers. It fills Name and Password callbacks and hands the device callback
/// (DeviceBindingCallback, DeviceSigningVerifierCallback) to its caller; it never touches keys itself.
///
/// Callbacks are answered by type; inputs are matched by the suffix of their names (`IDToken1jws`, …)
/// as the Ping SDKs do, so the callback's position in the journey does not matter.
public struct PingAMJourneyClient: Sendable {
    public let server: PingAMServer
    let http: any HTTPClient
    /// A journey that asks for more than this many steps is broken, not long.
    public var maxSteps = 10

    public init(server: PingAMServer, http: any HTTPClient) {
        self.server = server
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

    /// Drives the journey, answering Name and Password callbacks and handing each callback of type `device` to
    /// `answer`, which fills its inputs. Returns once the server reports success, after `answer` ran.
    ///
    /// When `answer` throws a `KeymgrFailure`, the server is told why with the SDKs' `clientError` before the
    /// error is rethrown, so the journey takes its failure outcome instead of hanging.
    public func run(journey: String, credentials: Credentials, answering device: String,
                    answer: (JourneyCallback) async throws -> Void) async throws {
        let url = try authenticateURL(journey: journey)
        var body: JSONValue = .object([:])
        var handled = false
        for _ in 0..<maxSteps {
            let response = try await post(url, body)
            guard let object = try? JSONDecoder().decode(JSONValue.self, from: response.body).objectValue else {
                throw TransportError(.unavailable, "the server's journey answer is not JSON (HTTP \(response.status))")
            }
            if response.status == 200, object["tokenId"] != nil || object["successUrl"] != nil {
                guard handled else {
                    throw TransportError(.rejected, "the journey \(journey) ended without a \(device): check the journey name")
                }
                return
            }
            guard response.status == 200, let callbacks = object["callbacks"]?.arrayValue else {
                let message = object["message"]?.stringValue ?? "HTTP \(response.status)"
                throw TransportError(response.status >= 500 ? .unavailable : .rejected,
                                     "the server ended the journey \(journey): \(message)")
            }
            var answered: [JSONValue] = []
            for raw in callbacks {
                let callback = JourneyCallback(raw)
                switch callback.type {
                case "NameCallback":
                    callback.setFirstInput(.string(credentials.username))
                case "PasswordCallback":
                    let password = try credentials.password()
                    callback.setFirstInput(.string(password.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }))
                case device:
                    do {
                        try await answer(callback)
                        handled = true
                    } catch let error as any KeymgrFailure {
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
        throw TransportError(.rejected, "the journey \(journey) took more than \(maxSteps) steps")
    }

    private func post(_ url: URL, _ body: JSONValue) async throws -> HTTPResponse {
        let request = HTTPRequest(method: "POST", url: url, headers: [
            "Content-Type": "application/json", "Accept": "application/json",
            "Accept-API-Version": "resource=2.0, protocol=1.0",
        ], body: Data(body.canonicalJSON().utf8))
        return try await http.send(request)
    }

    func authenticateURL(journey: String) throws -> URL {
        try server.url("/authenticate?authIndexType=service&authIndexValue=" + PingAMServer.percentEncodedSegment(journey))
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
public final class JourneyCallback {
    /// The callback as it will be sent back.
    public private(set) var json: JSONValue

    init(_ json: JSONValue) {
        self.json = json
    }

    /// `NameCallback`, `DeviceBindingCallback`, ….
    public var type: String { json["type"]?.stringValue ?? "" }

    /// The value of the output named `name`, if the callback has one.
    public func outputValue(_ name: String) -> JSONValue? {
        json["output"]?.arrayValue?.first { $0["name"]?.stringValue == name }?["value"]
    }

    /// The non-empty text output named `name`; the server is at fault when it is missing.
    public func output(_ name: String) throws -> String {
        guard let value = outputValue(name)?.stringValue, !value.isEmpty else {
            throw TransportError(.rejected, "the server's \(type) has no \(name)")
        }
        return value
    }

    /// The JWS lifetime the callback asks for (`timeout`, default 60 s); keymgr signs for 1 to 3600 seconds.
    public func jwsLifetime() throws -> Int {
        guard let value = outputValue("timeout") else { return 60 }
        guard let seconds = value.intValue, (1...3600).contains(seconds) else {
            throw TransportError(.rejected, "the server's \(type) asks for a JWS lifetime of \(value.canonicalJSON()) seconds; keymgr signs for 1 to 3600")
        }
        return Int(seconds)
    }

    /// Sets the input whose name ends with `suffix` (`IDToken1jws` for "jws").
    public func set(_ suffix: String, _ value: JSONValue) {
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
