import Foundation
import KeymgrCore

/// PingAM's (Common REST) JSON error: `{"code":401,"reason":"Unauthorized","message":"Login failure"}`.
struct AMError: Error, Sendable {
    var status: Int
    var message: String

    static func badRequest(_ message: String) -> AMError { AMError(status: 400, message: message) }
    static func unauthorized(_ message: String) -> AMError { AMError(status: 401, message: message) }
    static func notFound(_ message: String) -> AMError { AMError(status: 404, message: message) }
    static func preconditionFailed(_ message: String) -> AMError { AMError(status: 412, message: message) }
    static func notSupported(_ message: String) -> AMError { AMError(status: 501, message: message) }
    static func internalError(_ message: String) -> AMError { AMError(status: 500, message: message) }
    /// The journeys' failure: what PingAM answers when a tree ends in its Failure node.
    static let loginFailure = AMError(status: 401, message: "Login failure")
    /// The device REST's answer to a request without a valid session or token.
    static let accessDenied = AMError(status: 401, message: "Access Denied")

    /// The standard reason phrase, as Common REST writes it in `reason`: the status line's, but for 413, whose older
    /// name (RFC 7231) PingAM keeps.
    static func reason(for status: Int) -> String {
        status == 413 ? "Request Entity Too Large" : HTTPStatus(code: status).reasonPhrase
    }

    var json: JSONValue {
        .object([
            "code": .int(Int64(status)),
            "reason": .string(AMError.reason(for: status)),
            "message": .string(message),
        ])
    }

    var response: Response { jsonResponse(json, status: status) }
}

/// A JSON response with PingAM's content type.
func jsonResponse(_ json: JSONValue, status: Int = 200, headers extra: HTTPHeaders = [:]) -> Response {
    rawJSONResponse(json.encoded(), status: status, headers: extra)
}

/// A response whose body is the given bytes, labelled as JSON (used for malformed-JSON faults too).
func rawJSONResponse(_ body: Data, status: Int = 200, headers extra: HTTPHeaders = [:]) -> Response {
    var headers: HTTPHeaders = [.contentType: "application/json;charset=UTF-8"]
    headers.append(contentsOf: extra)
    headers[.cacheControl] = "no-store"
    return Response(status: HTTPStatus(code: status), headers: headers, body: Array(body))
}
