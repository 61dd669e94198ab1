import Foundation
import KeyManager
import Hummingbird

/// PingAM's authentication trees at `POST /json{realm}/authenticate?authIndexType=service&authIndexValue=<tree>`:
/// callbacks in `{"authId","callbacks":[{"type","output":[{"name","value"}],"input":[{"name","value"}],"_id"}]}`,
/// success `{"tokenId","successUrl","realm"}`, failure 401 `{"code":401,"reason":"Unauthorized","message":"Login failure"}`.
struct JourneyRoutes: Sendable {
    let handler: RequestHandler
    let realm: Realm

    private var configuration: ReferenceServerConfiguration { handler.configuration }

    func respond(to request: IncomingRequest) async throws -> Response {
        let now = configuration.clock()
        let body: JSONValue = request.body.isEmpty ? .object([:]) : try request.jsonBody()
        if let authId = body["authId"]?.stringValue {
            guard let session = await handler.state.takeSession(authId, now: now), session.realm == realm else {
                throw AMError.unauthorized("Session has timed out")
            }
            return try await advance(session, inputs: JourneyRoutes.inputs(of: body), now: now)
        }
        return try await begin(request, now: now)
    }

    // MARK: steps

    private func begin(_ request: IncomingRequest, now: Date) async throws -> Response {
        guard request.target.parameter("authIndexType") == "service",
            let name = request.target.parameter("authIndexValue")
        else {
            throw AMError.badRequest("authIndexType=service and authIndexValue=<tree> are required")
        }
        guard let journey = configuration.journeys.first(where: { $0.name == name }) else {
            throw AMError.badRequest("No configuration found for tree \(name)")
        }
        var callbacks: [JSONValue] = [
            JourneyRoutes.callback(
                "NameCallback", id: 0, output: [("prompt", .string("User Name"))], input: [("IDToken1", .string(""))])
        ]
        if case .deviceBinding = journey.kind {
            callbacks.append(
                JourneyRoutes.callback(
                    "PasswordCallback", id: 1, output: [("prompt", .string("Password"))],
                    input: [("IDToken2", .string(""))]))
        }
        let session = JourneySession(
            journey: journey, realm: realm, step: .credentials,
            expiresAt: now.addingTimeInterval(configuration.journeyLifetime))
        return try await next(session, callbacks: callbacks, now: now)
    }

    private func advance(_ session: JourneySession, inputs: [String: String], now: Date) async throws -> Response {
        switch (session.step, session.journey.kind) {
        case (.credentials, .deviceBinding(let authenticationType)):
            guard let username = inputs["IDToken1"], !username.isEmpty, let password = inputs["IDToken2"],
                let stored = try await handler.store.password(realm: realm.path, username: username),
                constantTimeEqual(stored, password)
            else { throw AMError.loginFailure }
            return try await deviceStep(
                session, username: username, now: now,
                callback: { challenge in
                    JourneyRoutes.callback(
                        "DeviceBindingCallback", id: 0,
                        output: [
                            ("userId", .string(realm.universalId(of: username))),
                            ("username", .string(username)),
                            ("authenticationType", .string(authenticationType.rawValue)),
                            ("challenge", .string(challenge)),
                            ("title", .string("Authentication required")),
                            ("subtitle", .string("Cryptography device binding")),
                            ("description", .string("Please complete with biometric to proceed")),
                            ("timeout", .int(Int64(configuration.callbackTimeout))),
                        ],
                        input: [
                            ("IDToken1jws", .string("")), ("IDToken1deviceName", .string("")),
                            ("IDToken1deviceId", .string("")), ("IDToken1clientError", .string("")),
                        ])
                })
        case (.credentials, .deviceSigning):
            guard let username = inputs["IDToken1"], !username.isEmpty else { throw AMError.loginFailure }
            // The Device Signing Verifier node's noDeviceRegistered outcome ends in Failure.
            let page = try await handler.store.page(realm: realm.path, user: username, after: nil, limit: 1)
            guard !page.devices.isEmpty else { throw AMError.loginFailure }
            return try await deviceStep(
                session, username: username, now: now,
                callback: { challenge in
                    JourneyRoutes.callback(
                        "DeviceSigningVerifierCallback", id: 0,
                        output: [
                            ("userId", .string(realm.universalId(of: username))),
                            ("challenge", .string(challenge)),
                            ("title", .string("Authentication required")),
                            ("subtitle", .string("Cryptography device binding")),
                            ("description", .string("Please complete with biometric to proceed")),
                            ("timeout", .int(Int64(configuration.callbackTimeout))),
                        ],
                        input: [("IDToken1jws", .string("")), ("IDToken1clientError", .string(""))])
                })
        case (.device(let username, let challenge), .deviceBinding):
            try refuseClientError(inputs)
            return try await completeBinding(username: username, challenge: challenge, inputs: inputs, now: now)
        case (.device(let username, let challenge), .deviceSigning):
            try refuseClientError(inputs)
            return try await completeSigning(username: username, challenge: challenge, inputs: inputs, now: now)
        }
    }

    private func deviceStep(
        _ session: JourneySession, username: String, now: Date, callback: (String) -> JSONValue
    ) async throws -> Response {
        // 32 random bytes, base64 (with padding), as PingAM's nodes issue them.
        let challenge = Data(try randomBytes(32)).base64EncodedString()
        var next = session
        next.step = .device(username: username, challenge: challenge)
        return try await self.next(next, callbacks: [callback(challenge)], now: now)
    }

    private func next(_ session: JourneySession, callbacks: [JSONValue], now: Date) async throws -> Response {
        let authId = try randomToken(bytes: 32)
        await handler.state.storeSession(session, authId: authId, now: now)
        return jsonResponse(.object(["authId": .string(authId), "callbacks": .array(callbacks)]))
    }

    /// The SDKs report `Unsupported`, `ClientNotRegistered`, `Timeout` or `Abort`; each ends the tree in Failure.
    private func refuseClientError(_ inputs: [String: String]) throws {
        if let clientError = inputs["IDToken1clientError"], !clientError.isEmpty { throw AMError.loginFailure }
    }

    // MARK: completion

    private func completeBinding(
        username: String, challenge: String, inputs: [String: String], now: Date
    ) async throws -> Response {
        guard let jws = inputs["IDToken1jws"], !jws.isEmpty, let deviceId = inputs["IDToken1deviceId"],
            !deviceId.isEmpty
        else { throw AMError.loginFailure }
        let check = JWSChecks(
            verifier: handler.verifier, allowedIssuers: configuration.allowedIssuers,
            skew: configuration.allowedClockSkew, now: now)
        let jwk: [String: String]
        do {
            jwk = try check.binding(jws, subject: realm.universalId(of: username), challenge: challenge)
        } catch {
            configuration.logger.info("binding JWS refused: \(error)")
            throw AMError.loginFailure
        }
        guard let kid = jwk["kid"] else { throw AMError.loginFailure }
        let millis = Int64((now.timeIntervalSince1970 * 1000).rounded())
        // The Device Binding node ALWAYS stores a new record; it never replaces one by deviceId.
        let device = BoundDevice(
            uuid: kid, realmPath: realm.path, user: username, deviceId: deviceId,
            deviceName: inputs["IDToken1deviceName"] ?? "", createdDate: millis, lastAccessDate: millis, key: jwk)
        guard try await handler.store.insert(device) else {
            configuration.logger.info("binding refused: a record with kid \(kid) exists")
            throw AMError.loginFailure
        }
        return try success()
    }

    private func completeSigning(
        username: String, challenge: String, inputs: [String: String], now: Date
    ) async throws -> Response {
        guard let jws = inputs["IDToken1jws"], !jws.isEmpty else { throw AMError.loginFailure }
        let check = JWSChecks(
            verifier: handler.verifier, allowedIssuers: configuration.allowedIssuers,
            skew: configuration.allowedClockSkew, now: now)
        do {
            // keyNotFound: the header kid names none of this user's records.
            let kid = try check.headerKid(jws)
            guard let device = try await handler.store.device(realm: realm.path, user: username, uuid: kid) else {
                throw JWSRejection("no bound device with kid \(kid) for this user")
            }
            try check.signing(
                jws, key: device.key, subject: realm.universalId(of: username), challenge: challenge)
        } catch {
            configuration.logger.info("signing JWS refused: \(error)")
            throw AMError.loginFailure
        }
        let millis = Int64((now.timeIntervalSince1970 * 1000).rounded())
        _ = try await handler.store.update(realm: realm.path, user: username, uuid: try check.headerKid(jws)) {
            $0.lastAccessDate = millis
        }
        return try success()
    }

    private func success() throws -> Response {
        let tokenId = try randomToken(bytes: 32) + "*"
        var headers = HTTPFields()
        headers[.setCookie] = "iPlanetDirectoryPro=\(tokenId); Path=/; HttpOnly"
        return jsonResponse(
            .object([
                "tokenId": .string(tokenId), "successUrl": .string("/console"),
                "realm": .string(realm.displayName),
            ]), headers: headers)
    }

    // MARK: wire helpers

    static func callback(
        _ type: String, id: Int, output: [(String, JSONValue)], input: [(String, JSONValue)]
    ) -> JSONValue {
        .object([
            "type": .string(type),
            "output": .array(output.map { .object(["name": .string($0.0), "value": $0.1]) }),
            "input": .array(input.map { .object(["name": .string($0.0), "value": $0.1]) }),
            "_id": .int(Int64(id)),
        ])
    }

    /// Every callback input the client sent, by name (`IDToken1`, `IDToken1jws`, …).
    static func inputs(of body: JSONValue) -> [String: String] {
        var inputs: [String: String] = [:]
        for callback in body["callbacks"]?.arrayValue ?? [] {
            for input in callback["input"]?.arrayValue ?? [] {
                guard let name = input["name"]?.stringValue else { continue }
                switch input["value"] {
                case .string(let value): inputs[name] = value
                case .int(let value): inputs[name] = String(value)
                case .bool(let value): inputs[name] = String(value)
                default: continue
                }
            }
        }
        return inputs
    }
}
