import Foundation
import KeymgrCore

/// PingAM's authentication journeys on the wire (`POST {base}/json{realm}/authenticate?authIndexType=service&authIndexValue=J`):
/// steps, callbacks and their answers. It fills Name and Password callbacks and hands the device callback
/// (DeviceBindingCallback, DeviceSigningVerifierCallback) to its caller; it never touches keys itself.
///
/// As the Ping SDKs do: inputs are matched by the suffix of their names (`IDToken1jws`, …); every request carries
/// `Accept-API-Version: resource=2.1, protocol=1.0` and the cookies the server set earlier in the same journey
/// (PingAM clusters route a journey's steps to one node by `amlbcookie`), kept in a jar that lives and dies with one
/// run; and a session the journey opens is ended at once: keymgr asks for none (`noSession=true`) and logs out a
/// `tokenId` it gets anyway. The `tokenId` is never returned, logged or stored.
public struct PingAMJourneyClient: JourneyRunner {
    public let server: PingAMServer
    let http: any HTTPClient
    /// A journey that asks for more than this many steps is broken, not long.
    public var maxSteps = 10
    /// Whether `/authenticate` asks for no session (`noSession=true`); a `tokenId` that comes anyway is logged out.
    public var requestsNoSession = true

    public init(server: PingAMServer, http: any HTTPClient) {
        self.server = server
        self.http = http
    }

    /// Drives the journey, answering Name and Password callbacks and handing each callback of type `device` to
    /// `answer`. Returns what `answer` made once the server reports success.
    ///
    /// `answer` runs on its own thread under the callback's deadline (`timeout`; 30 s for signing, 60 s for
    /// binding when absent), which covers the PIN prompt and the verifier. When it throws, or the deadline passes
    /// first, the server is told why with the SDKs' `clientError` (in the same answer as the step's other callbacks)
    /// so the journey takes its failure outcome, and the local error is rethrown (`timeout` for the deadline).
    ///
    /// A session the server opened and then would not end does not undo what the journey did: it is handed to
    /// `sessionNotEnded` (which must not show it) and the run still succeeds.
    ///
    /// `screen` sees every device callback of a step before `answer` sees any: when it refuses one (a callback for
    /// another user than the one asked for), that callback carries the `clientError` and no callback of the step is
    /// answered, so nothing is signed for a step that asks for more than it may.
    public func run<Value: Sendable>(journey: String, credentials: JourneyCredentials, answering device: String,
                                     sessionNotEnded: @escaping @Sendable (TransportError) -> Void = { _ in },
                                     screen: @escaping @Sendable (DeviceCallback) throws -> Void = { _ in },
                                     answer: @escaping @Sendable (DeviceCallback) throws -> DeviceAnswer<Value>) async throws -> Value {
        let url = try authenticateURL(journey: journey)
        var jar = CookieJar(sessionNotEnded: sessionNotEnded)
        var body: JSONValue = .object([:])
        var made: Value?
        for _ in 0..<maxSteps {
            let object = try await step(url, body, jar: &jar, journey: journey)
            if object["callbacks"] == nil {
                guard let made else {
                    throw TransportError(.rejected, "the journey \(journey) ended without a \(device): check the journey name")
                }
                return made
            }
            let callbacks = (object["callbacks"]?.arrayValue ?? []).map(JourneyCallback.init)
            // The device callback being screened or answered when something fails: it carries the clientError.
            var failing: JourneyCallback?
            do {
                for callback in callbacks where callback.type != device {
                    switch callback.type {
                    case "NameCallback":
                        guard !credentials.username.isEmpty else {
                            throw KeyManagerError(.usage, "the journey \(journey) asks for a user name: give --user NAME")
                        }
                        callback.setFirstInput(.string(credentials.username))
                    case "PasswordCallback":
                        callback.setFirstInput(.string(try credentials.password()))
                    default:
                        break
                    }
                }
                let deviceCallbacks = callbacks.filter { $0.type == device }
                for callback in deviceCallbacks {
                    failing = callback
                    try screen(callback.view)
                }
                for callback in deviceCallbacks {
                    failing = callback
                    let view = callback.view
                    let answered = try await Self.within(view.operationTimeout, what: "the server's \(device)") {
                        try answer(view)
                    }
                    for (suffix, value) in answered.inputs { callback.set(suffix, value) }
                    made = answered.value
                }
            } catch {
                if let reported = failing ?? callbacks.first(where: { $0.type == device }) {
                    // Tell the server why, as the SDKs do with clientError, then report the local error.
                    reported.set("clientError", .string(Self.clientError(for: error)))
                    var failed = object
                    failed["callbacks"] = .array(callbacks.map(\.json))
                    _ = try? await step(url, .object(failed), jar: &jar, journey: journey)
                }
                throw error
            }
            var next = object
            next["callbacks"] = .array(callbacks.map(\.json))
            body = .object(next)
        }
        throw TransportError(.rejected, "the journey \(journey) took more than \(maxSteps) steps")
    }

    /// Posts one step and returns the server's answer: the next step's callbacks, or (after ending any session it
    /// opened) the success object without its `tokenId`. A failure outcome throws.
    private func step(_ url: URL, _ body: JSONValue, jar: inout CookieJar, journey: String) async throws -> [String: JSONValue] {
        var headers = [
            "Content-Type": "application/json", "Accept": "application/json",
            "Accept-API-Version": "resource=2.1, protocol=1.0",
        ]
        if let cookie = jar.header { headers["Cookie"] = cookie }
        let response = try await http.send(HTTPRequest(method: "POST", url: url, headers: headers,
                                                       body: Data(body.canonicalJSON().utf8)))
        jar.store(setCookie: response.headers["set-cookie"])
        guard var object = try? JSONDecoder().decode(JSONValue.self, from: response.body).objectValue else {
            let message = "the server's journey answer is not JSON (HTTP \(response.status))"
            throw response.status >= 500 ? TransportError(verdict: .init(status: response.status), message)
                : TransportError(.malformed, message)
        }
        if response.status == 200, let tokenId = object["tokenId"]?.stringValue {
            object["tokenId"] = nil
            do {
                try await endSession(tokenId, jar: jar)
            } catch let error as TransportError {
                jar.sessionNotEnded(error)
            }
            return object
        }
        guard response.status == 200, object["callbacks"]?.arrayValue != nil || object["successUrl"] != nil else {
            let message = object["message"]?.stringValue ?? "HTTP \(response.status)"
            throw TransportError(verdict: .init(status: response.status), kind: response.status >= 500 ? .unavailable : .rejected,
                                 "the server ended the journey \(journey): \(message)")
        }
        return object
    }

    /// Logs out the session a journey opened (`POST {base}/json{realm}/sessions?_action=logout` with the session in
    /// the header the server named its cookie after, `iPlanetDirectoryPro` by default).
    private func endSession(_ tokenId: String, jar: CookieJar) async throws {
        let name = jar.name(ofValue: tokenId) ?? "iPlanetDirectoryPro"
        var headers = [
            "Content-Type": "application/json", "Accept": "application/json",
            "Accept-API-Version": "resource=3.1, protocol=1.0", name: tokenId,
        ]
        if let cookie = jar.header { headers["Cookie"] = cookie }
        let response = try await http.send(HTTPRequest(method: "POST", url: try server.url("/sessions?_action=logout"),
                                                       headers: headers, body: Data("{}".utf8)))
        guard (200..<300).contains(response.status) else {
            throw TransportError(verdict: .init(status: response.status), kind: response.status >= 500 ? .unavailable : .rejected,
                                 "the server did not end the journey's session (HTTP \(response.status) to the logout): "
                                     + "ask the administrator to end it, or to allow noSession=true")
        }
    }

    func authenticateURL(journey: String) throws -> URL {
        try server.url("/authenticate?authIndexType=service&authIndexValue=" + PingAMServer.percentEncodedSegment(journey)
            + (requestsNoSession ? "&noSession=true" : ""))
    }

    /// The `clientError` the SDKs report for a failure: `Unsupported`, `ClientNotRegistered`, `Timeout`, else `Abort`
    /// (a wrong PIN, a locked key, a rejected verifier, refused custom claims and anything else).
    static func clientError(for error: any Error) -> String {
        switch (error as? any KeymgrFailure)?.code {
        case .unsupported: "Unsupported"
        case .clientNotRegistered: "ClientNotRegistered"
        case .timeout: "Timeout"
        default: "Abort"
        }
    }

    /// Runs `work` on its own thread and returns its result, or throws `timeout` when `seconds` pass first (the
    /// work is then abandoned: the process reports and moves on, as the server's node does).
    static func within<T: Sendable>(_ seconds: TimeInterval, what: String,
                                    _ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let once = ResumeOnce(continuation)
            // Threads of keymgr's own, not libdispatch's pool and timers (OwnThreads says why).
            OwnThreads.start {
                Thread.sleep(forTimeInterval: seconds)
                once.resume(with: .failure(KeyManagerError(.timeout, "\(what) allows \(Int(seconds)) s and they passed "
                    + "before keymgr could answer: try again, answering the prompt sooner (the server was told Timeout)")))
            }
            OwnThreads.start {
                once.resume(with: Result { try work() })
            }
        }
    }
}

/// Resumes a continuation once: the first of the work and the deadline wins.
private final class ResumeOnce<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<T, any Error>?

    init(_ continuation: CheckedContinuation<T, any Error>) { self.continuation = continuation }

    func resume(with result: Result<T, any Error>) {
        let taken = lock.withLock { () -> CheckedContinuation<T, any Error>? in
            defer { continuation = nil }
            return continuation
        }
        taken?.resume(with: result)
    }
}

/// The cookies one journey's steps carry: only this run's, in memory, never saved or shared.
struct CookieJar {
    private var cookies: [(name: String, value: String)] = []
    /// Where a session that could not be logged out is reported.
    var sessionNotEnded: @Sendable (TransportError) -> Void = { _ in }

    init(sessionNotEnded: @escaping @Sendable (TransportError) -> Void = { _ in }) {
        self.sessionNotEnded = sessionNotEnded
    }

    /// `name=value; …` for the `Cookie` header; nil when empty.
    var header: String? {
        cookies.isEmpty ? nil : cookies.map { "\($0.name)=\($0.value)" }.joined(separator: "; ")
    }

    func name(ofValue value: String) -> String? { cookies.first { $0.value == value }?.name }

    /// Takes the cookies of a `Set-Cookie` header (several may arrive folded into one line, comma-separated);
    /// a cookie set empty or with `Max-Age=0` is removed.
    mutating func store(setCookie: String?) {
        guard let setCookie else { return }
        for line in Self.split(setCookie) {
            let attributes = line.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            guard let pair = attributes.first, let equals = pair.firstIndex(of: "="), equals != pair.startIndex else { continue }
            let name = String(pair[..<equals])
            let value = String(pair[pair.index(after: equals)...])
            let expired = attributes.dropFirst().contains { $0.lowercased().hasPrefix("max-age=") && Int($0.dropFirst(8)).map { $0 <= 0 } == true }
            cookies.removeAll { $0.name == name }
            if !value.isEmpty && !expired { cookies.append((name, value)) }
        }
    }

    /// Splits folded `Set-Cookie` lines at the commas that start a new cookie (not those inside `Expires=` dates).
    static func split(_ folded: String) -> [String] {
        var lines: [String] = []
        for piece in folded.components(separatedBy: ",") {
            let head = piece.split(separator: ";", maxSplits: 1).first.map(String.init) ?? piece
            if head.contains("=") || lines.isEmpty {
                lines.append(piece)
            } else {
                lines[lines.count - 1] += "," + piece
            }
        }
        return lines.map { $0.trimmingCharacters(in: .whitespaces) }
    }
}

/// One callback of a journey step, answered in place.
final class JourneyCallback {
    /// The callback as it will be sent back.
    private(set) var json: JSONValue

    init(_ json: JSONValue) {
        self.json = json
    }

    /// `NameCallback`, `DeviceBindingCallback`, ….
    var type: String { json["type"]?.stringValue ?? "" }

    /// The outputs, read-only, for the device callback's caller.
    var view: DeviceCallback {
        var outputs: [String: JSONValue] = [:]
        for output in json["output"]?.arrayValue ?? [] {
            if let name = output["name"]?.stringValue, let value = output["value"] { outputs[name] = value }
        }
        return DeviceCallback(type: type, outputs: outputs)
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
