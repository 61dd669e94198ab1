import Foundation
import KeymgrCore

/// PingAM / PingOne Advanced Identity Cloud device management REST for device bindings.
///
/// `GET {base}/json{realm}/users/{user}/devices/2fa/binding?_queryFilter=true`, paged with `_pageSize` and
/// `_pagedResultsCookie`; `PUT …/binding/{uuid}` with `If-Match: *` renames; `DELETE …/binding/{uuid}` deletes.
public struct PingAMDeviceClient: DeviceRegistry {
    public let server: PingAMServer
    let http: any HTTPClient
    let adminHeader: (String, String)
    public var pageSize = 100
    /// A listing longer than this many pages is an endless paging cookie, not a real device list.
    public var maxPages = 100
    public var maxAttempts = 3
    /// The longest `Retry-After` honoured; beyond it the user's listing fails for this run.
    public var maxRetryAfter: TimeInterval = 30

    public init(server: PingAMServer, http: any HTTPClient, adminHeader: (String, String)) {
        self.server = server
        self.http = http
        self.adminHeader = adminHeader
    }

    /// The user segment of the path: the `id=` value of a universalId, else the user id, as ONE encoded segment.
    public static func userSegment(_ userId: String) -> String {
        PingAMServer.percentEncodedSegment(serverUserId(userId))
    }

    /// The `id=` value of a universalId (up to its first unescaped comma, RFC 4514 escapes undone), else `userId`.
    static func serverUserId(_ userId: String) -> String {
        UniversalId.idValue(userId) ?? userId
    }

    func bindingsURL(userId: String, uuid: String? = nil, query: String? = nil) throws -> URL {
        var text = "/users/" + Self.userSegment(userId) + "/devices/2fa/binding"
        if let uuid { text += "/" + PingAMServer.percentEncodedSegment(uuid) }
        if let query { text += "?" + query }
        return try server.url(text)
    }

    private var headers: [String: String] {
        ["Accept-API-Version": "resource=1.0", "Accept": "application/json", adminHeader.0: adminHeader.1]
    }

    /// Every binding of `userId`, all pages; throws when any page fails or the listing is incomplete.
    public func listDevices(userId: String) async throws -> [ServerDevice] {
        var devices: [ServerDevice] = []
        var cookie: String?
        var seenCookies: Set<String> = []
        for _ in 0..<maxPages {
            var query = "_queryFilter=true&_pageSize=\(pageSize)"
            if let cookie { query += "&_pagedResultsCookie=" + PingAMServer.percentEncodedSegment(cookie) }
            let response = try await send(HTTPRequest(method: "GET", url: try bindingsURL(userId: userId, query: query), headers: headers))
            guard response.status == 200 else { throw Self.failure(response, doing: "list the devices of \(userId)") }
            let page = try Self.decodePage(response.body)
            devices += page.devices
            guard let next = page.cookie, !next.isEmpty else { return devices }
            guard seenCookies.insert(next).inserted else {
                throw TransportError(.malformed, "the server's device listing for \(userId) repeats a paging cookie: the listing is incomplete")
            }
            cookie = next
        }
        throw TransportError(.malformed, "the server's device listing for \(userId) did not end after \(maxPages) pages: the listing is incomplete")
    }

    /// Deletes a binding; 2xx or 404 (already gone) both confirm it is not on the server.
    /// - Returns: true when this request deleted it, false when the server answered 404 (already gone).
    @discardableResult
    public func deleteDevice(userId: String, uuid: String) async throws -> Bool {
        let response = try await send(HTTPRequest(method: "DELETE", url: try bindingsURL(userId: userId, uuid: uuid), headers: headers))
        guard (200..<300).contains(response.status) || response.status == 404 else {
            throw Self.failure(response, doing: "delete binding \(uuid) of \(userId)")
        }
        return response.status != 404
    }

    /// Renames a binding as the SDKs do: `PUT` of the whole device object (`_id`, `uuid`, `deviceId`,
    /// `deviceName`, `createdDate`, `lastAccessDate`, as listed) with `If-Match: *`.
    package func renameDevice(userId: String, device: ServerDevice, to deviceName: String) async throws {
        var headers = headers
        headers["If-Match"] = "*"
        headers["Content-Type"] = "application/json"
        var object: [String: JSONValue] = [
            "_id": .string(device.uuid), "uuid": .string(device.uuid), "deviceName": .string(deviceName),
        ]
        if let deviceId = device.deviceId { object["deviceId"] = .string(deviceId) }
        if let created = device.createdAt { object["createdDate"] = .int(Self.millis(created)) }
        if let access = device.lastAccessAt { object["lastAccessDate"] = .int(Self.millis(access)) }
        let body = JSONValue.object(object).canonicalJSON()
        let response = try await send(HTTPRequest(method: "PUT", url: try bindingsURL(userId: userId, uuid: device.uuid),
                                                  headers: headers, body: Data(body.utf8)))
        guard (200..<300).contains(response.status) else { throw Self.failure(response, doing: "rename binding \(device.uuid)") }
    }

    private static func millis(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    /// Sends with retries on 429 and 503, honouring `Retry-After` (seconds) up to `maxRetryAfter`, else backing off.
    func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        try await RetryingHTTPClient(http, maxAttempts: maxAttempts, maxRetryAfter: maxRetryAfter).send(request)
    }

    static func failure(_ response: HTTPResponse, doing: String) -> TransportError {
        let reason = (try? JSONDecoder().decode(JSONValue.self, from: response.body))?["message"]?.stringValue
        let detail = "the server answered \(response.status)\(reason.map { " (\($0))" } ?? "") when asked to \(doing)"
        switch response.status {
        case 401, 403: return TransportError(verdict: .init(status: response.status), detail + ": check the admin credential")
        default: return TransportError(verdict: .init(status: response.status), detail)
        }
    }

    static func decodePage(_ body: Data) throws -> (devices: [ServerDevice], cookie: String?) {
        guard let page = try? JSONDecoder().decode(JSONValue.self, from: body), let object = page.objectValue else {
            throw TransportError(.malformed, "the server's device listing is not JSON")
        }
        guard let results = object["result"]?.arrayValue else {
            throw TransportError(.malformed, "the server's device listing has no result array")
        }
        var devices: [ServerDevice] = []
        for entry in results {
            let key = entry["key"]
            guard let uuid = entry["uuid"]?.stringValue ?? entry["_id"]?.stringValue,
                  let kid = key?["kid"]?.stringValue ?? entry["_id"]?.stringValue else {
                throw TransportError(.malformed, "a device record in the server's listing has no uuid or key id")
            }
            devices.append(ServerDevice(uuid: uuid, kid: kid, deviceId: entry["deviceId"]?.stringValue,
                                        deviceName: entry["deviceName"]?.stringValue,
                                        createdAt: millis(entry["createdDate"]), lastAccessAt: millis(entry["lastAccessDate"])))
        }
        let cookie = object["pagedResultsCookie"]?.stringValue
        return (devices, cookie)
    }

    private static func millis(_ value: JSONValue?) -> Date? {
        // Epoch milliseconds; anything outside the years 1 to 9999 is not a date the server meant.
        guard let millis = value?.intValue.map(Double.init) ?? value?.doubleValue else { return nil }
        return ISOTime.date(milliseconds: millis)
    }
}
