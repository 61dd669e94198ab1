import Foundation
import KeymgrCore

/// An OAuth error response (RFC 6749 §5.2, RFC 6750 §3, RFC 7591 §3.2.2, RFC 9449 §7.1):
/// `{"error":"…","error_description":"…"}` with a status and extra headers.
struct OAuthError: Error, Sendable {
    var status: Int
    var error: String
    var description: String
    /// `WWW-Authenticate` for 401s of the resource and registration endpoints, nil elsewhere.
    var wwwAuthenticate: String?
    /// A `DPoP-Nonce` to send with the error (`use_dpop_nonce`).
    var dpopNonce: String?

    init(status: Int = 400, _ error: String, _ description: String, wwwAuthenticate: String? = nil, dpopNonce: String? = nil) {
        self.status = status
        self.error = error
        self.description = description
        self.wwwAuthenticate = wwwAuthenticate
        self.dpopNonce = dpopNonce
    }

    static func invalidRequest(_ description: String) -> OAuthError { OAuthError("invalid_request", description) }
    static func invalidGrant(_ description: String) -> OAuthError { OAuthError("invalid_grant", description) }
    static func invalidClientMetadata(_ description: String) -> OAuthError {
        OAuthError("invalid_client_metadata", description)
    }
    static func invalidDPoPProof(_ description: String) -> OAuthError { OAuthError("invalid_dpop_proof", description) }
    /// A bad or missing Bearer token at the registration endpoints (RFC 6750).
    static func invalidToken(_ description: String) -> OAuthError {
        OAuthError(status: 401, "invalid_token", description, wwwAuthenticate: #"Bearer error="invalid_token""#)
    }

    var json: JSONValue {
        .object(["error": .string(error), "error_description": .string(description)])
    }
}

/// What a verified DPoP proof tells the server.
struct DPoPProof: Sendable {
    /// The RFC 7638 thumbprint of the proof's `jwk`: what `cnf.jkt` binds tokens to.
    var jkt: String
    var claims: JSONValue
}

/// RFC 9449 §4.3: the checks on a DPoP proof, signature by keymgr's `JWS`/`P256PublicKey`.
struct DPoPVerifier: Sendable {
    let state: OAuthState
    let now: Date
    let proofLifetime: TimeInterval
    let skew: TimeInterval
    let nonceLifetime: TimeInterval

    /// Verifies the proof in `headerValues` (the request's `DPoP` header values) for `method` and `url`.
    /// `accessToken`: the token the proof must carry `ath` for (resource requests). `nonceIssuer`: when
    /// set, a current server nonce is required. Throws `invalid_dpop_proof` / `use_dpop_nonce`.
    func verify(
        headerValues: [String], method: String, url: String, accessToken: String?, nonceIssuer: NonceIssuer?
    ) async throws -> DPoPProof {
        guard headerValues.count == 1, let compact = headerValues.first, !compact.isEmpty else {
            throw OAuthError.invalidDPoPProof("exactly one DPoP header is required")
        }
        let decoded: DecodedJWS
        do {
            decoded = try JWS.decode(compact)
        } catch {
            throw OAuthError.invalidDPoPProof("the DPoP proof is not a compact JWS")
        }
        guard decoded.header["typ"]?.stringValue == "dpop+jwt" else {
            throw OAuthError.invalidDPoPProof("typ must be dpop+jwt")
        }
        guard decoded.header["alg"]?.stringValue == JWS.algorithm else {
            throw OAuthError.invalidDPoPProof("alg must be ES256")
        }
        guard let jwkJSON = decoded.header["jwk"], jwkJSON.objectValue != nil else {
            throw OAuthError.invalidDPoPProof("the header has no jwk")
        }
        guard jwkJSON["d"] == nil else { throw OAuthError.invalidDPoPProof("the jwk carries a private key") }
        let jwk: JWK
        do {
            jwk = try JWK(jsonObject: jwkJSON)
        } catch {
            throw OAuthError.invalidDPoPProof("the jwk is not a P-256 public key")
        }
        guard jwk.kty == "EC", jwk.crv == "P-256", let x = jwk.x, let y = jwk.y,
              Base64URL.decode(x)?.count == 32, Base64URL.decode(y)?.count == 32
        else {
            throw OAuthError.invalidDPoPProof("the jwk is not a P-256 public key")
        }
        do {
            _ = try ServerJWSVerifier.verified(compact, publicJWK: ["kty": "EC", "crv": "P-256", "x": x, "y": y])
        } catch {
            throw OAuthError.invalidDPoPProof("the DPoP proof signature does not verify")
        }
        let claims = JSONValue.object(decoded.claims)
        guard let jti = claims["jti"]?.stringValue, !jti.isEmpty else {
            throw OAuthError.invalidDPoPProof("jti is required")
        }
        guard claims["htm"]?.stringValue == method else { throw OAuthError.invalidDPoPProof("htm does not match") }
        guard let htu = claims["htu"]?.stringValue, let presented = DPoPVerifier.normalizedHTU(htu),
            presented == DPoPVerifier.normalizedHTU(url)
        else { throw OAuthError.invalidDPoPProof("htu does not match") }
        guard let iat = claims["iat"]?.doubleValue else { throw OAuthError.invalidDPoPProof("iat is required") }
        let current = now.timeIntervalSince1970
        guard iat <= current + skew, iat >= current - proofLifetime - skew else {
            throw OAuthError.invalidDPoPProof("iat is outside the accepted window")
        }
        if let accessToken {
            let expected = Base64URL.encode(ServerCrypto.sha256(Array(accessToken.utf8)))
            guard let ath = claims["ath"]?.stringValue, constantTimeEqual(ath, expected) else {
                throw OAuthError.invalidDPoPProof("ath does not match the access token")
            }
        }
        let keepUntil = Date(timeIntervalSince1970: current + proofLifetime + 2 * skew)
        guard await state.useJTI(jti, now: now, keepUntil: keepUntil) else {
            throw OAuthError.invalidDPoPProof("the proof's jti was already used")
        }
        if let nonceIssuer {
            let valid: Bool
            if let nonce = claims["nonce"]?.stringValue {
                valid = await state.isValidNonce(nonce, nonceIssuer, now: now, lifetime: nonceLifetime)
            } else {
                valid = false
            }
            if !valid {
                let fresh = try await state.nonce(nonceIssuer, now: now, lifetime: nonceLifetime)
                throw OAuthError(
                    "use_dpop_nonce", "Authorization server requires nonce in DPoP proof", dpopNonce: fresh)
            }
        }
        let jkt: String
        do {
            jkt = try jwk.serverThumbprint()
        } catch {
            throw OAuthError.invalidDPoPProof("the jwk has no thumbprint")
        }
        return DPoPProof(jkt: jkt, claims: claims)
    }

    /// `htu` compared as RFC 9449 §4.3 says: without query and fragment, after RFC 3986 syntax- and
    /// scheme-based normalization (case of scheme and host, default port, empty path, percent-encoding).
    static func normalizedHTU(_ text: String) -> String? {
        guard var components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
            scheme == "http" || scheme == "https", let host = components.host?.lowercased(), !host.isEmpty
        else { return nil }
        components.query = nil
        components.fragment = nil
        let defaultPort = scheme == "https" ? 443 : 80
        let port = components.port.flatMap { $0 == defaultPort ? nil : $0 }
        let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        guard let decodedPath = RawTarget.percentDecode(path, plusIsSpace: false) else { return nil }
        // Re-encode so `%7E` and `~`, `%2f` and `%2F` compare equal.
        let canonicalPath = decodedPath.split(separator: "/", omittingEmptySubsequences: false)
            .map { PathEncoding.segment(String($0)) }.joined(separator: "/")
        return scheme + "://" + host + (port.map { ":\($0)" } ?? "") + canonicalPath
    }
}
