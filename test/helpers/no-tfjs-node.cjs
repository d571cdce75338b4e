// `node --require ./test/helpers/no-tfjs-node.cjs …`: the native TensorFlow backend cannot load (requiring
// @tensorflow/tfjs-node or its binding fails), as on a host without TensorFlow; tfjs and its cpu backend stay.
const Module = require('node:module');

const load = Module._load;
Module._load = function (request, ...rest) {
  if (/tfjs-node|tfjs_binding/.test(request)) throw new Error(`the native TensorFlow backend is absent here (${request})`);
  return load.call(this, request, ...rest);
};
