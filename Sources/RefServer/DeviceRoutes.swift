import Foundation
import KeymgrCore

/// PingAM's bound-device REST for one user: query, update (rename) and delete
/// (`/json{realm}/users/{user}/devices/2fa/binding[/{uuid}]`, resource version 1.0).
struct DeviceRoutes: Sendable {
    let handler: RequestHandler
    let realm: Realm
    let user: String

    /// Size of the `hugeBody` fault's body.
    static let hugeBodySize = 10 * 1024 * 1024

    func respond(to request: IncomingRequest, uuid: String?) async throws -> Response {
        try checkAPIVersion(request)
        let isListing = uuid == nil && request.method == .get
        var fault = await handler.state.takeFault(user: user, isListing: isListing)
        if case .delay(let seconds) = fault {
            try await Task.sleep(nanoseconds: UInt64(seconds * 1_000_000_000))
            fault = nil
        }
        switch fault {
        case .status500:
            return AMError.internalError("Internal Server Error").response
        case .status503(let retryAfter):
            var headers = HTTPHeaders()
            headers[.retryAfter] = String(retryAfter)
            return jsonResponse(
                AMError(status: 503, message: "Service Unavailable").json, status: 503, headers: headers)
        case .malformedJSON:
            return rawJSONResponse(Data(#"{"result":[{"_id":"truncated","deviceName":"#.utf8))
        case .wrongContentType:
            return Response(
                status: .ok, headers: [.contentType: "text/html; charset=utf-8"],
                body: Array("<html><body><h1>Sign in</h1></body></html>".utf8))
        case .connectionReset:
            return await ConnectionFaults.reset(request)
        case .truncatedBody:
            return await ConnectionFaults.truncated(try await answer(request, uuid: uuid, fault: nil))
        case .slowBody(let seconds):
            return await ConnectionFaults.trickled(try await answer(request, uuid: uuid, fault: nil), over: seconds)
        default:
            return try await answer(request, uuid: uuid, fault: fault)
        }
    }

    /// The device REST's normal answer, shaped by `fault` (padding, endless paging).
    private func answer(_ request: IncomingRequest, uuid: String?, fault: Fault?) async throws -> Response {
        let padded = fault == .hugeBody
        switch (request.method, uuid) {
        case (.get, nil):
            return try await list(request, endless: fault == .endlessPaging, padded: padded)
        case (.put, let uuid?):
            return try await rename(request, uuid: uuid, padded: padded)
        case (.delete, let uuid?):
            return try await delete(uuid: uuid, padded: padded)
        case (.get, _?):
            throw AMError.notSupported("Read operations are not supported on bound devices")
        default:
            throw AMError.notSupported("The operation is not supported on bound devices")
        }
    }

    /// The device REST is resource version 1.0: `Accept-API-Version` must say so
    /// (PingAM with the REST API default version behaviour set to None).
    private func checkAPIVersion(_ request: IncomingRequest) throws {
        guard let header = request.headers.value(named: "Accept-API-Version") else {
            throw AMError.badRequest("No requested version specified and behavior set to NONE")
        }
        var resourceVersion: String?
        for part in header.split(separator: ",") {
            let pair = part.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            if pair.count == 2, pair[0].lowercased() == "resource" { resourceVersion = pair[1] }
        }
        guard let resourceVersion else {
            throw AMError.badRequest("No requested version specified and behavior set to NONE")
        }
        let numbers = resourceVersion.split(separator: ".", omittingEmptySubsequences: false)
        guard numbers.count <= 2, numbers.first == "1", numbers.count == 1 || numbers[1] == "0" else {
            throw AMError.badRequest("Unsupported resource version: \(resourceVersion); this resource is version 1.0")
        }
    }

    // MARK: query

    private func list(_ request: IncomingRequest, endless: Bool, padded: Bool) async throws -> Response {
        let target = request.target
        guard let filter = target.parameter("_queryFilter") else {
            throw AMError.badRequest("A query filter (_queryFilter) is required to list bound devices")
        }
        let matchesAll: Bool
        switch filter.trimmingCharacters(in: .whitespaces) {
        case "true": matchesAll = true
        case "false": matchesAll = false
        default: throw AMError.badRequest("Unsupported query filter: \(filter); use _queryFilter=true")
        }
        var pageSize: Int?
        if let text = target.parameter("_pageSize") {
            guard let value = Int(text), value >= 0 else {
                throw AMError.badRequest("The value '\(text)' for parameter '_pageSize' is not a non-negative integer")
            }
            pageSize = value == 0 ? nil : value
        }
        var after: Int64?
        if let cookie = target.parameter("_pagedResultsCookie"), !cookie.isEmpty {
            guard let decoded = DeviceRoutes.decodeCookie(cookie) else {
                throw AMError.badRequest("Invalid paged results cookie")
            }
            after = decoded
        }
        var page = DevicePage(devices: [], nextAfter: nil)
        if matchesAll {
            page = try await handler.store.page(realm: realm.path, user: user, after: after, limit: pageSize)
        }
        var cookie: JSONValue = page.nextAfter.map { .string(DeviceRoutes.encodeCookie(after: $0)) } ?? .null
        if endless {
            // Past the last record the cookie points beyond every row: empty pages, forever.
            let position = page.nextAfter ?? Int64.max
            cookie = .string(DeviceRoutes.encodeCookie(after: position, nonce: try randomToken(bytes: 8)))
        }
        var members: [String: JSONValue] = [
            "result": .array(page.devices.map(\.wireJSON)),
            "resultCount": .int(Int64(page.devices.count)),
            "pagedResultsCookie": cookie,
            "totalPagedResultsPolicy": .string("NONE"),
            "totalPagedResults": .int(-1),
            "remainingPagedResults": .int(-1),
        ]
        if padded { members["_padding"] = .string(String(repeating: "x", count: DeviceRoutes.hugeBodySize)) }
        return jsonResponse(.object(members))
    }

    /// Cookies are opaque to clients; here they carry the last record's insertion sequence.
    static func encodeCookie(after seq: Int64, nonce: String? = nil) -> String {
        Base64URL.encode(Array((nonce.map { "\(seq):\($0)" } ?? "\(seq)").utf8))
    }

    static func decodeCookie(_ cookie: String) -> Int64? {
        guard let bytes = Base64URL.decode(cookie), let text = String(validating: bytes, as: UTF8.self),
            let first = text.split(separator: ":").first
        else { return nil }
        return Int64(first)
    }

    // MARK: update

    /// Common REST's PUT: `If-None-Match: *` would be a create (bound devices have none); otherwise an
    /// update whose `If-Match` is `*`, the current `_rev`, or absent (Common REST then updates
    /// without a revision check, as PingAM does).
    private func rename(_ request: IncomingRequest, uuid: String, padded: Bool) async throws -> Response {
        let ifMatch = request.headers[.ifMatch]
        if let ifNoneMatch = request.headers[.ifNoneMatch] {
            if ifMatch != nil {
                throw AMError.preconditionFailed("Simultaneous use of If-Match and If-None-Match not supported for PUT requests")
            }
            if ifNoneMatch.trimmingCharacters(in: .whitespaces) == "*" {
                throw AMError.notSupported("Create operations are not supported on bound devices")
            }
        }
        try checkContentType(request)
        let body = try request.jsonBody()
        guard body.objectValue != nil else {
            throw AMError.badRequest("The request could not be processed because the provided content is not a JSON object")
        }
        guard let newName = body["deviceName"]?.stringValue else {
            throw AMError.badRequest("deviceName is required and must be a string")
        }
        guard let current = try await handler.store.device(realm: realm.path, user: user, uuid: uuid) else {
            throw AMError.notFound("Device \(uuid) not found")
        }
        if let ifMatch {
            let wanted = ifMatch.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            guard wanted == "*" || wanted == current.revision else {
                throw AMError.preconditionFailed("Expected revision \(wanted) but found \(current.revision)")
            }
        }
        guard
            let updated = try await handler.store.update(realm: realm.path, user: user, uuid: uuid, { device in
                device.deviceName = newName
            })
        else { throw AMError.notFound("Device \(uuid) not found") }
        return recordResponse(updated, padded: padded)
    }

    /// Common REST refuses a body labelled anything but JSON (or multipart) on writes.
    private func checkContentType(_ request: IncomingRequest) throws {
        guard let contentType = request.headers[.contentType] else { return }
        let mediaType = contentType.split(separator: ";").first.map {
            $0.trimmingCharacters(in: .whitespaces).lowercased()
        } ?? ""
        guard mediaType == "application/json" || mediaType.hasPrefix("multipart/form-data") else {
            throw AMError.badRequest(
                "The request could not be processed because it specified the content-type '\(contentType)' "
                    + "when only the content-type 'application/json' and 'multipart/form-data' are supported")
        }
    }

    // MARK: delete

    private func delete(uuid: String, padded: Bool) async throws -> Response {
        guard let deleted = try await handler.store.delete(realm: realm.path, user: user, uuid: uuid) else {
            throw AMError.notFound("Device \(uuid) not found")
        }
        return recordResponse(deleted, padded: padded)
    }

    private func recordResponse(_ device: BoundDevice, padded: Bool) -> Response {
        var headers = HTTPHeaders()
        headers[.eTag] = "\"\(device.revision)\""
        guard padded, case .object(var members) = device.wireJSON else {
            return jsonResponse(device.wireJSON, headers: headers)
        }
        members["_padding"] = .string(String(repeating: "x", count: DeviceRoutes.hugeBodySize))
        return jsonResponse(.object(members), headers: headers)
    }
}
