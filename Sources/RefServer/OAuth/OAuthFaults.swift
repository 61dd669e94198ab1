import Foundation
import KeymgrCore

/// The authorization server's endpoints, as fault targets.
public enum OAuthEndpoint: String, Sendable, CaseIterable {
    /// Both discovery documents.
    case discovery
    /// `POST` registration (RFC 7591).
    case registration
    /// `GET/PUT/DELETE` on `registration_client_uri` (RFC 7592).
    case management
    /// The token endpoint.
    case token
    /// Revocation (RFC 7009).
    case revocation
    /// Device authorization (RFC 8628).
    case deviceAuthorization = "device_authorization"
    /// The DPoP-protected resource (userinfo).
    case resource
    /// Token introspection (RFC 7662).
    case introspection
}

/// A misbehaviour of the authorization server, on one endpoint: outages, and the ways real servers
/// differ from the RFCs as docs/wire-formats.md lists (so keymgr is tested against them).
public enum OAuthFault: Sendable, Equatable {
    /// Answer `500` with an OAuth error body `server_error`.
    case status500
    /// Answer `503` with `Retry-After` and `temporarily_unavailable`.
    case status503(retryAfter: Int)
    /// Wait this many seconds, then answer normally.
    case delay(seconds: Double)
    /// Answer `200` labelled JSON with a truncated, unparseable body.
    case malformedJSON
    /// Token endpoint: answer `200` with well-formed JSON that is no token response (no `access_token`).
    case garbageTokenResponse
    /// Answer `200` with an HTML body and `Content-Type: text/html`.
    case wrongContentType
    /// Token endpoint: a dead refresh token (`invalid_grant`) gets `400` with an EMPTY body.
    case emptyBodyOnInvalidGrant
    /// `invalid_dpop_proof` answered with this status (401 or 403) instead of 400.
    case dpopErrorStatus(Int)
    /// Token responses say `dpop` / `bearer` in lower case.
    case lowercaseTokenType
    /// Registration responses carry `token_endpoint_auth_method` as a one-element array.
    case authMethodAsArray
    /// Registration answers `200` instead of `201`.
    case registration200
    /// Registration and management answers name a `registration_client_uri` under this URL (another origin, as a
    /// hostile or misconfigured server would) instead of the server's own: `<url>/<client id>`.
    case foreignRegistrationClientURI(String)
    /// Reset the connection (TCP RST) before any answer. Nothing is done.
    case connectionReset
    /// Do the work and answer, but close the connection after half of the body (its full `Content-Length` announced).
    case truncatedBody
    /// Do the work and answer, the body in small pieces spread over this many seconds.
    case slowBody(seconds: Double)
    /// Answer `200` with a 10 MiB JSON object that would otherwise pass for a token and a registration answer
    /// (`access_token`, `token_type`, `client_id`, plus a `_padding` member). Nothing is done.
    case hugeBody
    /// Token endpoint: DPoP proofs are ignored and every token issued is Bearer, a bound refresh token refreshing as
    /// Bearer too (a server whose DPoP support an administrator switched off; Authlib and oauthlib have none).
    case dpopSwitchedOff

    /// The fault's name on the admin HTTP surface.
    public var name: String {
        switch self {
        case .status500: return "status500"
        case .status503: return "status503"
        case .delay: return "delay"
        case .malformedJSON: return "malformedJSON"
        case .garbageTokenResponse: return "garbageTokenResponse"
        case .wrongContentType: return "wrongContentType"
        case .emptyBodyOnInvalidGrant: return "emptyBodyOnInvalidGrant"
        case .dpopErrorStatus: return "dpopErrorStatus"
        case .lowercaseTokenType: return "lowercaseTokenType"
        case .authMethodAsArray: return "authMethodAsArray"
        case .registration200: return "registration200"
        case .foreignRegistrationClientURI: return "foreignRegistrationClientURI"
        case .connectionReset: return "connectionReset"
        case .truncatedBody: return "truncatedBody"
        case .slowBody: return "slowBody"
        case .hugeBody: return "hugeBody"
        case .dpopSwitchedOff: return "dpopSwitchedOff"
        }
    }

    /// Outages replace the answer; quirks shape a normal answer.
    var isOutage: Bool {
        switch self {
        case .status500, .status503, .delay, .malformedJSON, .garbageTokenResponse, .wrongContentType, .connectionReset,
             .truncatedBody, .slowBody, .hugeBody:
            return true
        default: return false
        }
    }

    /// The admin HTTP form: `{"fault":"dpopErrorStatus","status":401}`.
    var json: JSONValue {
        switch self {
        case .status503(let retryAfter):
            return .object(["fault": .string(name), "retryAfter": .int(Int64(retryAfter))])
        case .delay(let seconds), .slowBody(let seconds):
            return .object(["fault": .string(name), "seconds": .double(seconds)])
        case .dpopErrorStatus(let status):
            return .object(["fault": .string(name), "status": .int(Int64(status))])
        case .foreignRegistrationClientURI(let url):
            return .object(["fault": .string(name), "url": .string(url)])
        default:
            return .object(["fault": .string(name)])
        }
    }

    /// Parses the admin HTTP form.
    init?(json: JSONValue) {
        switch json["fault"]?.stringValue {
        case "status500": self = .status500
        case "status503":
            let retryAfter = json["retryAfter"]?.intValue ?? 1
            guard retryAfter >= 0, retryAfter <= 86_400 else { return nil }
            self = .status503(retryAfter: Int(retryAfter))
        case "delay":
            guard let seconds = json["seconds"]?.doubleValue, seconds >= 0, seconds <= 3600 else { return nil }
            self = .delay(seconds: seconds)
        case "slowBody":
            guard let seconds = json["seconds"]?.doubleValue, seconds >= 0, seconds <= 3600 else { return nil }
            self = .slowBody(seconds: seconds)
        case "malformedJSON": self = .malformedJSON
        case "garbageTokenResponse": self = .garbageTokenResponse
        case "wrongContentType": self = .wrongContentType
        case "emptyBodyOnInvalidGrant": self = .emptyBodyOnInvalidGrant
        case "dpopErrorStatus":
            let status = json["status"]?.intValue ?? 401
            guard status == 400 || status == 401 || status == 403 else { return nil }
            self = .dpopErrorStatus(Int(status))
        case "lowercaseTokenType": self = .lowercaseTokenType
        case "authMethodAsArray": self = .authMethodAsArray
        case "registration200": self = .registration200
        case "foreignRegistrationClientURI":
            guard let url = json["url"]?.stringValue, URL(string: url)?.host != nil else { return nil }
            self = .foreignRegistrationClientURI(url)
        case "connectionReset": self = .connectionReset
        case "truncatedBody": self = .truncatedBody
        case "hugeBody": self = .hugeBody
        case "dpopSwitchedOff": self = .dpopSwitchedOff
        default: return nil
        }
    }

    static let names =
        "status500, status503 (retryAfter), delay (seconds), malformedJSON, garbageTokenResponse, wrongContentType, "
        + "emptyBodyOnInvalidGrant, dpopErrorStatus (status), lowercaseTokenType, authMethodAsArray, registration200, "
        + "foreignRegistrationClientURI (url), connectionReset, truncatedBody, slowBody (seconds), hugeBody, dpopSwitchedOff"
}

/// The faults that apply to one request: at most one outage, any number of quirks.
struct OAuthFaultSet: Sendable {
    var outage: OAuthFault?
    var quirks: [OAuthFault] = []

    func has(_ fault: OAuthFault) -> Bool { quirks.contains(fault) }

    /// Where `foreignRegistrationClientURI` points registration client URIs, if it applies.
    var foreignRegistrationClientURI: String? {
        for case .foreignRegistrationClientURI(let url) in quirks { return url }
        return nil
    }

    /// The status of `invalid_dpop_proof` errors.
    var dpopErrorStatus: Int {
        for case .dpopErrorStatus(let status) in quirks { return status }
        return 400
    }
}
