// A handler's output in the result document, byte for byte
// (docs/contract.md, "The output, byte for byte").

const utf8 = new TextDecoder("utf-8", { fatal: true });
const WHITESPACE = new Set([0x20, 0x09, 0x0a, 0x0d]);

/**
 * toBytes turns what a handler returned into its output bytes: bytes as
 * they are, a string as UTF-8, nothing as no output, any other value as
 * compact JSON.
 * @returns {Uint8Array}
 */
export function toBytes(value) {
  if (value === undefined || value === null) return new Uint8Array();
  if (value instanceof Uint8Array) return value;
  if (typeof value === "string") return new TextEncoder().encode(value);
  const text = JSON.stringify(value);
  if (text === undefined) throw new Error("the handler returned a value JSON cannot hold");
  return new TextEncoder().encode(text);
}

/**
 * resultValue is how the document stores output: the JSON text of its
 * `result` field (verbatim for RFC 8259 JSON) and its `result_encoding`,
 * or null for empty output. JSON.parse is strict RFC 8259 (no NaN, no
 * trailing comma); the whitespace around the value is checked apart.
 * @param {Uint8Array} out
 * @returns {{raw: string, encoding?: "text" | "base64"} | null}
 */
export function resultValue(out) {
  if (out.length === 0) return null;
  let text;
  try {
    text = utf8.decode(out);
  } catch {
    return { raw: JSON.stringify(Buffer.from(out).toString("base64")), encoding: "base64" };
  }
  if (!WHITESPACE.has(out[0]) && !WHITESPACE.has(out[out.length - 1])) {
    try {
      JSON.parse(text);
      return { raw: text };
    } catch {
      // not JSON: stored as text
    }
  }
  return { raw: JSON.stringify(text), encoding: "text" };
}

/**
 * encodeDoc serialises a result document, with the output's JSON text
 * spliced in verbatim as `result`.
 * @param {object} doc the document without result and result_encoding
 * @param {{raw: string, encoding?: string} | null} [value]
 * @returns {string}
 */
export function encodeDoc(doc, value) {
  const text = JSON.stringify(doc);
  if (!value) return text;
  const enc = value.encoding ? `,"result_encoding":${JSON.stringify(value.encoding)}` : "";
  return `${text.slice(0, -1)},"result":${value.raw}${enc}}`;
}

/**
 * output returns a stored document's output as bytes: the UTF-8 of the
 * string for "text", the base64-decoded string for "base64", else the JSON
 * value serialised again (byte-identical when the handler wrote compact
 * JSON), empty when there is no result.
 * @returns {Uint8Array}
 */
export function output(doc) {
  if (doc.result === undefined) return new Uint8Array();
  switch (doc.result_encoding) {
    case undefined:
      return new TextEncoder().encode(JSON.stringify(doc.result));
    case "text":
      return new TextEncoder().encode(doc.result);
    case "base64":
      return new Uint8Array(Buffer.from(doc.result, "base64"));
    default:
      throw new Error(`task ${doc.id}: unknown result_encoding ${JSON.stringify(doc.result_encoding)}`);
  }
}
