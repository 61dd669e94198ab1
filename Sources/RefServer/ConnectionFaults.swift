import Foundation

/// Faults below HTTP, shared by the device REST (`Fault`) and the authorization server (`OAuthFault`): the
/// connection reset before any answer, the answer cut off halfway, the answer dribbled out slowly. Test-only: they
/// exist so the fault suite can show what keymgr does when the network, not the server, misbehaves. The server's
/// connection carries them out (`Response.Delivery`).
enum ConnectionFaults {
    /// Resets the connection `request` arrived on before a byte of the answer is sent, as a crashed process or a
    /// load balancer dropping the connection does.
    static func reset(_ request: IncomingRequest) async -> Response {
        Response(status: .internalServerError, delivery: .reset)
    }

    /// `response` with its full `Content-Length` announced but only the first half of the body sent; then the
    /// connection is closed, as when the network breaks while the answer is on its way. The server did the work.
    static func truncated(_ response: Response) async -> Response {
        var cut = response
        cut.delivery = .truncated
        return cut
    }

    /// `response` with its head sent at once and its body in small pieces spread over `seconds`, as a congested
    /// link or an overloaded proxy delivers it. The server did the work.
    static func trickled(_ response: Response, over seconds: Double) async -> Response {
        var slow = response
        slow.delivery = .trickled(seconds: seconds)
        return slow
    }
}
