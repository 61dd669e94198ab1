import Foundation
import KeymgrCore

/// PingAM's authentication trees at `POST /json{realm}/authenticate?authIndexType=service&authIndexValue=<tree>`:
/// callbacks in `{"authId","callbacks":[{"type","output":[{"name","value"}],"input":[{"name","value"}],"_id"}]}`,
/// success `{"tokenId","successUrl","realm"}` (without `tokenId` under `noSession=true`), failure 401
/// `{"code":401,"reason":"Unauthorized","message":"Login failure"}`.
///
/// As a PingAM cluster behind a load balancer: the first step sets the affinity cookie (`amlbcookie`) and a later
/// step without it reaches a node that does not know the journey. A session is counted until
/// `POST /json{realm}/sessions?_action=logout` ends it.
struct JourneyRoutes: Sendable {
    let handler: RequestHandler
    let realm: Realm

    private var configuration: ReferenceServerConfiguration { handler.configuration }
    private var policy: JourneyPolicy { configuration.journeyPolicy }

    func respond(to request: IncomingRequest) async throws -> Response {
        let now = configuration.clock()
        let body: JSONValue = request.body.isEmpty ? .object([:]) : try request.jsonBody()
        if let authId = body["authId"]?.stringValue {
            guard let session = await handler.state.takeSession(authId, now: now), session.realm == realm else {
                throw AMError.unauthorized("Session has timed out")
            }
            guard Self.cookie(policy.affinityCookie, in: request) == session.affinity else {
                // Routed to another node of the cluster, which holds no state for this journey.
                configuration.logger.info("journey step without its \(policy.affinityCookie) cookie: failed")
                throw AMError.unauthorized("Session has timed out")
            }
            let noSession = policy.honoursNoSession && request.target.parameter("noSession") == "true"
            return try await advance(session, inputs: JourneyRoutes.inputs(of: body), noSession: noSession, now: now)
        }
        return try await begin(request, now: now)
    }

    /// `POST /json{realm}/sessions?_action=logout` with the session in the `iPlanetDirectoryPro` header (or cookie).
    func logout(_ request: IncomingRequest) async throws -> Response {
        guard request.target.parameter("_action") == "logout" else {
            throw AMError.badRequest("Action \(request.target.parameter("_action") ?? "") not supported")
        }
        guard let tokenId = request.headers.value(named: policy.sessionCookie) ?? Self.cookie(policy.sessionCookie, in: request),
            await handler.state.endSession(tokenId)
        else { throw AMError.unauthorized("Access Denied") }
        return jsonResponse(.object(["result": .string("Successfully logged out")]))
    }

    /// The value of cookie `name` in the request's `Cookie` header(s).
    static func cookie(_ name: String, in request: IncomingRequest) -> String? {
        for header in request.headers[values: .cookie] {
            for pair in header.split(separator: ";") {
                let parts = pair.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
                if parts.count == 2, parts[0] == name { return String(parts[1]) }
            }
        }
        return nil
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
        var session = JourneySession(
            journey: journey, realm: realm, step: .credentials,
            expiresAt: now.addingTimeInterval(configuration.journeyLifetime))
        // Which node holds the journey: the load balancer's cookie, set on the first answer.
        session.affinity = String(Int(try randomBytes(1)[0] % 90) + 10)
        var headers = HTTPHeaders()
        headers[.setCookie] = "\(policy.affinityCookie)=\(session.affinity); Path=/; HttpOnly"
        if journey.kind == .usernamelessSigning {
            return try await deviceStep(session, username: "", now: now, headers: headers, callback: signingCallback(userId: ""))
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
        return try await next(session, callbacks: callbacks, now: now, headers: headers)
    }

    private func signingCallback(userId: String) -> (String) -> [JSONValue] {
        { challenge in
            [signingCallback(userId: userId, index: 1, challenge: challenge)]
                + policy.foreignSigningUsers.enumerated().map { offset, other in
                    signingCallback(userId: realm.universalId(of: other), index: offset + 2, challenge: challenge)
                }
        }
    }

    /// One DeviceSigningVerifierCallback, its inputs named `IDToken<index>jws` and `IDToken<index>clientError`.
    private func signingCallback(userId: String, index: Int, challenge: String) -> JSONValue {
        JourneyRoutes.callback(
            "DeviceSigningVerifierCallback", id: index - 1,
            output: [
                ("userId", .string(userId)),
                ("challenge", .string(challenge)),
                ("title", .string("Authentication required")),
                ("subtitle", .string("Cryptography device binding")),
                ("description", .string("Please complete with biometric to proceed")),
                ("timeout", .int(Int64(configuration.callbackTimeout))),
            ],
            input: [("IDToken\(index)jws", .string("")), ("IDToken\(index)clientError", .string(""))])
    }

    private func advance(
        _ session: JourneySession, inputs: [String: String], noSession: Bool, now: Date
    ) async throws -> Response {
        switch (session.step, session.journey.kind) {
        case (.credentials, .deviceBinding(let authenticationType)):
            guard let username = inputs["IDToken1"], !username.isEmpty, let password = inputs["IDToken2"],
                let stored = try await handler.store.password(realm: realm.path, username: username),
                constantTimeEqual(stored, password)
            else { throw AMError.loginFailure }
            return try await deviceStep(
                session, username: username, now: now,
                callback: { challenge in
                    // A hostile server (foreignBindingUser) asks to bind another user than the one who logged in.
                    let named = policy.foreignBindingUser ?? username
                    return [JourneyRoutes.callback(
                        "DeviceBindingCallback", id: 0,
                        output: [
                            ("userId", .string(realm.universalId(of: named))),
                            ("username", .string(named)),
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
                        ])]
                })
        case (.credentials, .deviceSigning):
            guard let username = inputs["IDToken1"], !username.isEmpty else { throw AMError.loginFailure }
            // The Device Signing Verifier node's noDeviceRegistered outcome ends in Failure.
            let page = try await handler.store.page(realm: realm.path, user: username, after: nil, limit: 1)
            guard !page.devices.isEmpty else { throw AMError.loginFailure }
            return try await deviceStep(
                session, username: username, now: now, callback: signingCallback(userId: realm.universalId(of: username)))
        case (.credentials, .usernamelessSigning):
            throw AMError.loginFailure
        case (.device(let username, let challenge), .deviceBinding):
            try await refuseClientError(inputs, session: session, callback: "DeviceBindingCallback", user: username)
            return try await completeBinding(
                username: username, challenge: challenge, inputs: inputs, noSession: noSession, now: now)
        case (.device(let username, let challenge), .deviceSigning), (.device(let username, let challenge), .usernamelessSigning):
            try await refuseClientError(inputs, session: session, callback: "DeviceSigningVerifierCallback", user: username)
            return try await completeSigning(
                username: username, challenge: challenge, inputs: inputs, noSession: noSession, now: now)
        }
    }

    private func deviceStep(
        _ session: JourneySession, username: String, now: Date, headers: HTTPHeaders = [:],
        callback: (String) -> [JSONValue]
    ) async throws -> Response {
        // 32 random bytes, base64 (with padding), as PingAM's nodes issue them.
        let challenge = Data(try randomBytes(32)).base64EncodedString()
        var next = session
        next.step = .device(username: username, challenge: challenge)
        return try await self.next(next, callbacks: callback(challenge), now: now, headers: headers)
    }

    private func next(
        _ session: JourneySession, callbacks: [JSONValue], now: Date, headers: HTTPHeaders = [:]
    ) async throws -> Response {
        let authId = try randomToken(bytes: 32)
        await handler.state.storeSession(session, authId: authId, now: now)
        return jsonResponse(.object(["authId": .string(authId), "callbacks": .array(callbacks)]), headers: headers)
    }

    /// The SDKs report `Unsupported`, `ClientNotRegistered`, `Timeout` or `Abort`; each ends the tree in Failure
    /// and is recorded, so tests can see which one came.
    private func refuseClientError(
        _ inputs: [String: String], session: JourneySession, callback: String, user: String
    ) async throws {
        // Callback 1 is the user's; callbacks 2… (a hostile step) belong to the foreign users, in order.
        let users = [user] + (callback == "DeviceSigningVerifierCallback" ? policy.foreignSigningUsers : [])
        var refused = false
        for (offset, named) in users.enumerated() {
            guard let clientError = inputs["IDToken\(offset + 1)clientError"], !clientError.isEmpty else { continue }
            await handler.state.record(
                JourneyClientError(journey: session.journey.name, callback: callback, user: named, clientError: clientError))
            refused = true
        }
        if refused { throw AMError.loginFailure }
    }

    // MARK: completion

    private func completeBinding(
        username: String, challenge: String, inputs: [String: String], noSession: Bool, now: Date
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
        if let limit = policy.maxSavedDevices,
            try await handler.store.page(realm: realm.path, user: username, after: nil, limit: nil).devices.count >= limit
        {
            configuration.logger.info("binding refused: \(username) already has \(limit) saved devices")
            throw AMError.loginFailure
        }
        let millis = Int64((now.timeIntervalSince1970 * 1000).rounded())
        // The Device Binding node ALWAYS stores a new record; it never replaces one by deviceId.
        let device = BoundDevice(
            uuid: kid, realmPath: realm.path, user: username, deviceId: deviceId,
            deviceName: inputs["IDToken1deviceName"] ?? "", createdDate: millis, lastAccessDate: millis, key: jwk)
        guard try await handler.store.insert(device) else {
            configuration.logger.info("binding refused: a record with kid \(kid) exists")
            throw AMError.loginFailure
        }
        return try await success(user: username, noSession: noSession)
    }

    private func completeSigning(
        username: String, challenge: String, inputs: [String: String], noSession: Bool, now: Date
    ) async throws -> Response {
        guard let jws = inputs["IDToken1jws"], !jws.isEmpty else { throw AMError.loginFailure }
        let check = JWSChecks(
            verifier: handler.verifier, allowedIssuers: configuration.allowedIssuers,
            skew: configuration.allowedClockSkew, now: now)
        let signer: String
        do {
            // keyNotFound: the header kid names none of this user's records (of the realm's, when usernameless).
            let kid = try check.headerKid(jws)
            let found: BoundDevice?
            if username.isEmpty {
                found = try await handler.store.allDevices().first { $0.realmPath == realm.path && $0.uuid == kid }
            } else {
                found = try await handler.store.device(realm: realm.path, user: username, uuid: kid)
            }
            guard let device = found else { throw JWSRejection("no bound device with kid \(kid) for this user") }
            try check.signing(
                jws, key: device.key, subject: realm.universalId(of: device.user), challenge: challenge)
            signer = device.user
        } catch {
            configuration.logger.info("signing JWS refused: \(error)")
            throw AMError.loginFailure
        }
        let millis = Int64((now.timeIntervalSince1970 * 1000).rounded())
        _ = try await handler.store.update(realm: realm.path, user: signer, uuid: try check.headerKid(jws)) {
            $0.lastAccessDate = millis
        }
        return try await success(user: signer, noSession: noSession)
    }

    /// The success outcome: a session (`tokenId`, also set as the session cookie), unless `noSession=true` asked for none.
    private func success(user: String, noSession: Bool) async throws -> Response {
        guard !noSession else {
            return jsonResponse(.object(["successUrl": .string("/console"), "realm": .string(realm.displayName)]))
        }
        let tokenId = try randomToken(bytes: 32) + "*"
        await handler.state.openSession(tokenId, OpenSession(realmPath: realm.path, user: user))
        var headers = HTTPHeaders()
        headers[.setCookie] = "\(policy.sessionCookie)=\(tokenId); Path=/; HttpOnly"
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
