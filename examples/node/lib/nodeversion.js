// spool-client runs on the Node.js that package.json states in "engines":
// a clear refusal here beats an obscure failure inside a dependency.

const MIN = 20;
const major = Number(process.versions.node.split(".")[0]);
if (major < MIN) {
  throw new Error(`spool-client needs Node.js ${MIN} or newer (package.json "engines"); this is Node.js ${process.versions.node}`);
}
