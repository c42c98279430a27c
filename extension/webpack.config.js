// Merged into @jupyterlab/builder's webpack config (package.json: jupyterlab.webpackConfig).
//
// Module ids by name instead of webpack's production default, hashes ("deterministic"): the
// hash of the federation container's module covers its identifier, which holds the absolute
// path of lib/index.js, so the committed bundle (remoteEntry.<contenthash>.js) came out
// different in every checkout location. Names are relative to this folder, the same everywhere.
module.exports = {
  optimization: {
    moduleIds: 'named'
  }
};
