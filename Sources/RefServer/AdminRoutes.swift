import Foundation
import KeymgrCore

/// The test surface under `/__refserver/` (not part of PingAM), behind the admin credential:
/// users, device records, faults, the request journal, open sessions and the clientError outcomes of journeys.
struct AdminRoutes: Sendable {
    let handler: RequestHandler

    func respond(to request: IncomingRequest) async throws -> Response {
        let path = Array(request.target.segments.dropFirst())
        if path == ["health"], request.method == .get {
            return jsonResponse(.object(["status": .string("ok")]))
        }
        try handler.authorize(request)
        switch (request.method, path.first, path.count) {
        case (.get, "users", 1):
            let users = try await handler.store.users()
            return jsonResponse(
                .object([
                    "result": .array(
                        users.map { .object(["realm": .string($0.realmPath), "username": .string($0.username)]) })
                ]))
        case (.post, "users", 1):
            let body = try request.jsonBody()
            guard let username = body["username"]?.stringValue, !username.isEmpty,
                let password = body["password"]?.stringValue
            else { throw AMError.badRequest("username and password are required") }
            let realm = try realmPath(body["realm"]?.stringValue)
            try await handler.store.upsertUser(realm: realm, username: username, password: password)
            return jsonResponse(.object(["realm": .string(realm), "username": .string(username)]), status: 201)
        case (.get, "devices", 1):
            let devices = try await handler.store.allDevices()
            return jsonResponse(
                .object([
                    "result": .array(devices.map(\.adminJSON)), "resultCount": .int(Int64(devices.count)),
                ]))
        case (.post, "devices", 1):
            let device = try deviceFromBody(try request.jsonBody())
            guard try await handler.store.insert(device) else {
                throw AMError(status: 409, message: "A device with uuid \(device.uuid) exists")
            }
            return jsonResponse(device.adminJSON, status: 201)
        case (.delete, "devices", 2):
            guard let deleted = try await handler.store.delete(realm: nil, user: nil, uuid: path[1]) else {
                throw AMError.notFound("Device \(path[1]) not found")
            }
            return jsonResponse(deleted.adminJSON)
        case (.get, "faults", 1):
            let faults = await handler.state.currentFaults()
            return jsonResponse(.object(["faults": .object(faults.mapValues(\.json))]))
        case (.put, "faults", 2):
            let body = try request.jsonBody()
            guard let fault = Fault(json: body) else {
                throw AMError.badRequest(
                    "fault must be one of \(Fault.names)")
            }
            let count = body["count"]?.intValue
            if let count, count < 1 { throw AMError.badRequest("count must be at least 1") }
            await handler.state.setFault(fault, user: path[1], count: count.map { Int($0) })
            return jsonResponse(fault.json)
        case (.delete, "faults", 2):
            await handler.state.clearFault(user: path[1])
            return Response(status: .noContent)
        case (.delete, "faults", 1):
            await handler.state.clearFaults()
            return Response(status: .noContent)
        case (.get, "sessions", 1):
            return jsonResponse(.object(["open": .int(Int64(await handler.state.openSessionCount()))]))
        case (.get, "client-errors", 1):
            let reports = await handler.state.recordedClientErrors()
            return jsonResponse(
                .object([
                    "result": .array(
                        reports.map {
                            .object([
                                "journey": .string($0.journey), "callback": .string($0.callback), "user": .string($0.user),
                                "clientError": .string($0.clientError),
                            ])
                        })
                ]))
        case (.get, "requests", 1):
            let requests = await handler.state.recordedRequests()
            return jsonResponse(.object(["result": .array(requests.map(\.json))]))
        case (.delete, "requests", 1):
            await handler.state.clearRecordedRequests()
            return Response(status: .noContent)
        case (_, "oauth", _):
            return try await OAuthAdminRoutes(handler: handler).respond(to: request, path: Array(path.dropFirst()))
        default:
            throw AMError.notFound("Resource '/\(request.target.segments.joined(separator: "/"))' not found")
        }
    }

    private func realmPath(_ requested: String?) throws -> String {
        guard let requested else { return handler.realms[0].path }
        guard let realm = handler.realms.first(where: { $0.path == requested }) else {
            throw AMError.badRequest("Realm \(requested) is not served")
        }
        return realm.path
    }

    /// `{"user","realm"?,"deviceId","deviceName","key":{…,"kid"},"createdDate"?,"lastAccessDate"?}`.
    private func deviceFromBody(_ body: JSONValue) throws -> BoundDevice {
        guard let user = body["user"]?.stringValue, !user.isEmpty,
            let deviceId = body["deviceId"]?.stringValue,
            let members = body["key"]?.objectValue
        else { throw AMError.badRequest("user, deviceId and key are required") }
        var key: [String: String] = [:]
        for (name, value) in members { if let text = value.stringValue { key[name] = text } }
        guard let kid = key["kid"], !kid.isEmpty else { throw AMError.badRequest("key.kid is required") }
        let now = Int64((handler.configuration.clock().timeIntervalSince1970 * 1000).rounded())
        let created = body["createdDate"]?.intValue ?? now
        return BoundDevice(
            uuid: kid, realmPath: try realmPath(body["realm"]?.stringValue), user: user, deviceId: deviceId,
            deviceName: body["deviceName"]?.stringValue ?? "", createdDate: created,
            lastAccessDate: body["lastAccessDate"]?.intValue ?? created, key: key)
    }
}
