// Validates Kubernetes objects against the API's OpenAPI schemas (npm kubernetes-models,
// which scripts/setup.sh installs under FEDLGC_NODE_PREFIX, default
// /usr/local/lib/fedlgc-node). Reads a JSON array of objects on stdin; prints one line per
// object, "ok KIND/NAME" or "invalid KIND/NAME: why"; exits 1 when any is invalid, 2 for an
// object of a kind it has no schema for.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const prefix = process.env.FEDLGC_NODE_PREFIX || "/usr/local/lib/fedlgc-node";
const models = `${prefix}/node_modules/kubernetes-models`;
const objects = JSON.parse(readFileSync(0, "utf8"));
let status = 0;
for (const obj of objects) {
  const [group, version] = obj.apiVersion.includes("/") ? obj.apiVersion.split("/") : ["", obj.apiVersion];
  const path = `${models}/${group ? group + "/" : ""}${version}/${obj.kind}.js`;
  const name = `${obj.kind}/${obj.metadata?.name}`;
  let Model;
  try {
    Model = (await import(pathToFileURL(path).href))[obj.kind];
  } catch (e) {
    console.log(`no schema for ${obj.apiVersion} ${name}: ${e.message}`);
    process.exit(2);
  }
  try {
    new Model(obj).validate();
    console.log(`ok ${name}`);
  } catch (e) {
    console.log(`invalid ${name}: ${e.message}`);
    status = 1;
  }
}
process.exit(status);
